"""`python -m vaswani_plugin.tools.attention_pictures`: every head's attention (Figures 3-5) of a trained checkpoint."""

import numpy
import pytest
import torch
from cli_helpers import REPO, run_module
from fairseq.data import Dictionary
from matplotlib.image import imread

from vaswani_plugin.errors import VaswaniConfigError
from vaswani_plugin.models.layers import MultiHeadAttention
from vaswani_plugin.serving.loading import load_model
from vaswani_plugin.tools import attention_pictures
from vaswani_plugin.tools.attention_pictures import KINDS, captured_attention, encode, main

LAYERS = {"encoder_self": 1, "decoder_self": 2, "encoder_decoder": 2}  # TINY_MODEL: 1 encoder, 2 decoder layers
HEADS = 4


@pytest.fixture(scope="module")
def sentence_pair(reversal_data):
    """The first test sentence of the reversal corpus and its reference."""
    return tuple((reversal_data / f"test.{side}").read_text().splitlines()[0] for side in ("src", "tgt"))


@pytest.fixture(scope="module")
def checkpoint(reversal_training):
    """The session's trained tiny model."""
    return reversal_training[0] / "checkpoint_last.pt"


def options(reversal_data, checkpoint, source, output_dir, *more):
    """The command line's arguments, on the session's trained checkpoint and data-bin."""
    return [
        str(argument)
        for argument in (
            "--path",
            checkpoint,
            "--data",
            reversal_data / "joined",
            "--source",
            source,
            "--output-dir",
            output_dir,
            *more,
        )
    ]


def picture_names():
    """The PNGs of the default --layer and --head, in the order the command writes them."""
    return [f"{kind}_layer{layer}_{which}.png" for kind, layer in LAYERS.items() for which in ("head1", "all_heads")]


def check_outputs(output_dir, source_words, target_words):
    """The PNGs load; attention.npz has probability rows of the right shapes, causal where it must be."""
    expected = set(picture_names())
    assert {path.name for path in output_dir.glob("*.png")} == expected
    for name in expected:
        assert imread(output_dir / name).ndim == 3
    saved = numpy.load(output_dir / "attention.npz")
    source, target = len(source_words) + 1, len(target_words) + 1  # </s> ends the source; the decoder outputs it
    assert saved["encoder_self"].shape == (LAYERS["encoder_self"], HEADS, source, source)
    assert saved["decoder_self"].shape == (LAYERS["decoder_self"], HEADS, target, target)
    assert saved["encoder_decoder"].shape == (LAYERS["encoder_decoder"], HEADS, target, source)
    for kind in KINDS:
        numpy.testing.assert_allclose(saved[kind].sum(axis=-1), 1.0, atol=1e-5)
    assert not numpy.triu(saved["decoder_self"], k=1).any()
    assert saved["source_tokens"].tolist() == source_words + ["</s>"]
    assert saved["target_tokens"].tolist() == target_words + ["</s>"]
    assert saved["decoder_input_tokens"].tolist() == ["</s>"] + target_words


def test_command_with_a_target(reversal_data, checkpoint, sentence_pair, tmp_path):
    source, target = sentence_pair
    result = run_module(
        "vaswani_plugin.tools.attention_pictures",
        *options(reversal_data, checkpoint, source, tmp_path / "pictures", "--target", target),
        cwd=REPO,
    )
    check_outputs(tmp_path / "pictures", source.split(), target.split())
    assert result.stdout.splitlines() == [f"source: {source}", f"target: {target}"] + [
        str(tmp_path / "pictures" / name) for name in picture_names() + ["attention.npz"]
    ]


def test_without_a_target_the_translation_is_pictured(
    reversal_data, checkpoint, sentence_pair, tmp_path, monkeypatch, capsys
):
    # The barely trained model never ends a sentence: a short length limit keeps the pictures small.
    monkeypatch.setattr(attention_pictures, "MAX_LEN_B", 3)
    source, _ = sentence_pair
    main(options(reversal_data, checkpoint, source, tmp_path))
    hypothesis = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("target (beam"))
    check_outputs(tmp_path, source.split(), hypothesis.split(": ", 1)[1].split())


def test_captured_weights_reproduce_the_models_attention(reversal_data, checkpoint, sentence_pair):
    task, model = load_model(checkpoint, reversal_data / "joined", None, None)
    source = encode(task.source_dictionary, sentence_pair[0], "--source")
    target = encode(task.target_dictionary, sentence_pair[1], "--target")
    net_input = (source[None], torch.tensor([len(source)]), torch.cat([target[-1:], target[:-1]])[None])
    calls = {}

    def record(module, args, kwargs, output):
        calls[module] = (args[0], kwargs.get("memory"), output[0])

    hooks = [
        module.register_forward_hook(record, with_kwargs=True)
        for module in model.modules()
        if isinstance(module, MultiHeadAttention)
    ]
    with torch.no_grad():
        plain_logits, _ = model(*net_input)
        with captured_attention(model) as captured:
            logits, extra = model(*net_input)
    for hook in hooks:
        hook.remove()
    assert torch.equal(logits, plain_logits) and not any(module._forward_hooks for module in model.modules())
    # The decoder's own head average of its last encoder-decoder attention (what --print-alignment uses).
    torch.testing.assert_close(captured["encoder_decoder"][-1].mean(dim=1), extra["attn"][0])
    # Every sub-layer's output again as W^O Concat_h(P_h V_h), from the captured P; the model itself ran SDPA.
    for kind, (_, stack, sublayer) in KINDS.items():
        for layer, probabilities in zip(getattr(model, stack).layers, captured[kind]):
            attention = getattr(layer, sublayer).sublayer
            x, memory, output = calls[attention]
            values = (attention.qkv_proj(x) if memory is None else attention.kv_proj(memory))[..., -attention.v_size :]
            values = values.view(1, -1, attention.heads, attention.value_dim).transpose(1, 2)
            heads = (probabilities @ values).transpose(1, 2).reshape(1, -1, attention.v_size)
            torch.testing.assert_close(attention.out_proj(heads), output, atol=1e-5, rtol=1e-5)


def not_vaswani(checkpoint, folder):
    """The trained checkpoint, relabelled as fairseq's own `transformer`."""
    state = torch.load(checkpoint, weights_only=True)
    state["cfg"]["model"]["_name"] = "transformer"
    torch.save(state, folder / "transformer.pt")
    return folder / "transformer.pt"


@pytest.mark.parametrize(
    "change, message",
    [
        (
            lambda args, tmp: args + ["--layer", "3"],
            "--layer 3 is out of range: valid layers are 1..1 (encoder 1, decoder 2)",
        ),
        (
            lambda args, tmp: args + ["--head", "0"],
            "--head 0 is out of range: valid heads are 1..4 (encoder 4, decoder 4)",
        ),
        (lambda args, tmp: args[:5] + ["  "] + args[6:], "--source is empty"),
        (
            lambda args, tmp: ["--path", tmp / "missing.pt"] + args[2:],
            "--path {tmp}/missing.pt: no such checkpoint file",
        ),
        (
            lambda args, tmp: ["--path", not_vaswani(args[1], tmp)] + args[2:],
            "--path {tmp}/transformer.pt holds a 'transformer' model, not a vaswani_transformer "
            "(a fairseq transformer: convert it first with python -m vaswani_plugin.checkpoints.convert_fairseq)",
        ),
        (lambda args, tmp: args + ["--target-lang", "de"], "--data {data} has no dict.de.txt"),
    ],
)
def test_mistakes_are_one_line_errors(reversal_data, checkpoint, sentence_pair, tmp_path, change, message):
    arguments = [
        str(argument) for argument in change(options(reversal_data, checkpoint, sentence_pair[0], tmp_path), tmp_path)
    ]
    with pytest.raises(SystemExit) as error:
        main(arguments)
    assert str(error.value) == "vaswani_plugin.tools.attention_pictures: error: " + message.format(
        tmp=tmp_path, data=reversal_data / "joined"
    )


def test_unknown_words_become_unk_with_one_warning(capsys):
    dictionary = Dictionary()
    dictionary.add_symbol("known")
    tokens = encode(dictionary, "known new known other", "--source")
    assert tokens.tolist() == [
        dictionary.index("known"),
        dictionary.unk(),
        dictionary.index("known"),
        dictionary.unk(),
        dictionary.eos(),
    ]
    assert capsys.readouterr().err == "warning: --source: not in the dictionary, read as <unk>: new other\n"


def test_other_dictionaries_are_named_as_the_mistake(reversal_data, checkpoint, tmp_path):
    """serving/loading.py: a data-bin whose dictionaries are not the checkpoint's (one more word: every
    embedding and the output layer one row larger) is reported as such."""
    for lang in ("src", "tgt"):
        words = (reversal_data / "joined" / f"dict.{lang}.txt").read_text()
        (tmp_path / f"dict.{lang}.txt").write_text(words + "unseenword 1\n")
    with pytest.raises(VaswaniConfigError) as error:
        load_model(checkpoint, tmp_path, "src", "tgt")
    assert str(error.value) == f"the dictionaries in --data {tmp_path} are not the ones {checkpoint} was trained with"


def test_a_load_error_that_is_no_dictionary_mismatch_keeps_its_cause(reversal_data, checkpoint, tmp_path):
    """serving/loading.py: a checkpoint that lacks a parameter fails in load_state_dict too, with the right
    dictionaries: its one line says what torch said, and torch's error is the cause."""
    state = torch.load(checkpoint, weights_only=True)
    del state["model"]["decoder.output_projection.weight"]
    torch.save(state, tmp_path / "incomplete.pt")
    with pytest.raises(VaswaniConfigError) as error:
        load_model(tmp_path / "incomplete.pt", reversal_data / "joined", option="--checkpoint")
    message = str(error.value)
    assert message.startswith(f"--checkpoint {tmp_path / 'incomplete.pt'} does not load: Error(s) in loading ")
    assert '"decoder.output_projection.weight"' in message  # the missing key, named in the one line
    assert "\n" not in message and "dictionaries" not in message
    assert isinstance(error.value.__cause__, RuntimeError) and "decoder.output_projection.weight" in str(
        error.value.__cause__
    )

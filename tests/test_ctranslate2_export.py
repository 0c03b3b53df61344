"""The CTranslate2 export (vaswani_plugin.serving.export_ctranslate2) and its translate command, checked against the
plugin's own decoding of the same model: fairseq-generate's greedy output, fairseq's beam search scores, the
model's forward pass, fairseq-interactive's pipeline (the hub) on raw text. Broken on purpose, each of these
fails: the sinusoids in the concatenated sin/cos layout, or counted from 1; the learned table shifted by a row;
the embeddings unscaled; a pre-norm stack exported as post-norm; <pad> left possible; decoding from <s>; the
source without </s>; the detokeniser left out; the length limit without the source's </s>.

The reversal model of conftest, trained 500 more updates (conftest's `trained`), so that it translates: its
hypotheses end before the length limit and it gives <pad> almost no probability (< 1e-4), which the exported
model never emits (docs/reference.md). The variants of the architecture are random models,
checked token by token.
"""

import ast
import importlib
import io
import math
import re
import sys
from pathlib import Path

import ctranslate2
import pytest
import sentencepiece
import torch
from cli_helpers import plugin_dir, run
from conftest import build_model, make_dictionary, random_tokens
from fairseq import checkpoint_utils
from fairseq.data import data_utils
from fairseq.dataclass.configs import GenerationConfig
from fairseq.sequence_generator import SequenceGenerator
from test_hub import BPE_CODES, RAW

import vaswani_plugin
from vaswani_plugin.errors import VaswaniConfigError
from vaswani_plugin.models.vaswani_transformer import VaswaniTransformerModel
from vaswani_plugin.serving import export_ctranslate2, translate_ctranslate2


def token_batch(dictionary, sentences):
    """Source sentences (lists of words) as fairseq batches them: </s> appended, padded on the left."""
    tokens = [torch.tensor([dictionary.index(word) for word in words] + [dictionary.eos()]) for words in sentences]
    src_tokens = data_utils.collate_tokens(tokens, dictionary.pad(), left_pad=True)
    return {"net_input": {"src_tokens": src_tokens, "src_lengths": torch.tensor([len(t) for t in tokens])}}


@pytest.fixture(scope="module")
def exported(trained, tmp_path_factory):
    """The trained model exported by the command, float32."""
    checkpoint, data, _ = trained
    output = tmp_path_factory.mktemp("ct2") / "float32"
    export_ctranslate2.main(["--checkpoint", str(checkpoint), "--data", str(data), "--output", str(output)])
    return output


def translator(path, **options):
    return ctranslate2.Translator(str(path), device="cpu", intra_threads=1, inter_threads=1, **options)


def test_greedy_output_equals_the_plugins_fairseq_generate(trained, exported, tmp_path):
    checkpoint, data, sources = trained
    result = run(
        "generate",
        data,
        "--user-dir",
        plugin_dir(),
        "--path",
        checkpoint,
        "--task",
        "vaswani_translation",
        "--gen-subset",
        "test",
        "--beam",
        "1",
        "--required-batch-size-multiple",
        "1",
        "--cpu",
        cwd=tmp_path,
    )
    generated = {int(m[1]): m[2].split() for m in re.finditer(r"^H-(\d+)\t\S+\t(.*)$", result.stdout, re.M)}
    assert sorted(generated) == list(range(len(sources)))
    # fairseq's limit (200 tokens, then </s> forced) and CTranslate2's (200 tokens) give the same words.
    results = translator(exported).translate_batch(sources, beam_size=1, max_decoding_length=200, min_decoding_length=1)
    translations = [result.hypotheses[0] for result in results]
    assert translations == [generated[i] for i in range(len(sources))]
    reversals = [["x" + word[1:] for word in reversed(words)] for words in sources]
    assert sum(t == r for t, r in zip(translations, reversals)) > len(sources) / 2  # it has learnt something


def fairseq_beam_search(trained, lenpen: float):
    """Each test sentence's best hypothesis by fairseq's SequenceGenerator, beam 4 (the checkpoint's task is
    fairseq's `translation`), and the target dictionary."""
    checkpoint, data, sources = trained
    (model,), _, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(checkpoint)], arg_overrides={"data": str(data)}
    )
    generator = task.build_generator([model.eval()], GenerationConfig(beam=4, lenpen=lenpen))
    with torch.no_grad():
        outputs = task.inference_step(generator, [model], token_batch(task.source_dictionary, sources))
    return [hypotheses[0] for hypotheses in outputs], task.target_dictionary


# CTranslate2 masks a token (</s> before min_decoding_length) before its softmax, fairseq after: with
# min_decoding_length 1 every CTranslate2 score would also hold log 1/(1 - P(</s> first)). Comparing scores,
# no minimum, except where an empty hypothesis would change the search (the beam's test below).
SCORING = dict(beam_size=4, return_scores=True, max_decoding_length=200, min_decoding_length=0)


def test_beam_search_and_scores_equal_fairseqs_with_length_normalisation(trained, exported):
    """fairseq-generate's default --lenpen 1 (score log P(Y|X) / |Y|, |Y| counting </s>) is CTranslate2's
    length_penalty 1, and both stop a sentence when 4 hypotheses have ended: the same hypotheses, the same
    scores to 1e-4. As fairseq's search (min_len 1) and the translate command: no empty hypothesis, </s> masked at
    the first step (min_decoding_length 1). Without it, an empty hypothesis that ranks in the beam at the first step
    (log P -11 on one machine's model) counts as ended for CTranslate2 and stops the sentence a step early. The
    scores then hold log 1/(1 - P(</s> first)) / |Y| more, below the 1e-4 of the comparison for this model."""
    best, dictionary = fairseq_beam_search(trained, lenpen=1.0)
    results = translator(exported).translate_batch(
        trained[2], length_penalty=1.0, **dict(SCORING, min_decoding_length=1)
    )
    for hypothesis, result in zip(best, results):
        tokens = hypothesis["tokens"].tolist()
        assert tokens[-1] == dictionary.eos()  # ended before the limit
        assert result.hypotheses[0] == [dictionary[i] for i in tokens[:-1]]
        assert result.scores[0] == pytest.approx(hypothesis["score"].item(), abs=1e-4)


def test_without_length_penalty_scores_agree_per_token(trained, exported):
    """Length penalty off (--lenpen 0, length_penalty 0): scores are log P(Y|X). CTranslate2 then stops a sentence
    when its best candidate has ended, fairseq when 4 hypotheses have: CTranslate2 returns fairseq's hypothesis
    or a more probable one. Its log P of fairseq's hypotheses, token by token, is fairseq's to 1e-4."""
    best, dictionary = fairseq_beam_search(trained, lenpen=0.0)
    sources = trained[2]
    ct2 = translator(exported)
    same = 0
    for hypothesis, result in zip(best, ct2.translate_batch(sources, length_penalty=0.0, **SCORING)):
        words = [dictionary[i] for i in hypothesis["tokens"].tolist()[:-1]]
        tolerance = 1e-4 * (len(words) + 1)
        if result.hypotheses[0] == words:
            same += 1
            assert result.scores[0] == pytest.approx(hypothesis["score"].item(), abs=tolerance)
        else:
            assert result.scores[0] > hypothesis["score"].item() - tolerance
    assert same >= 0.9 * len(sources)
    words = [[dictionary[i] for i in hypothesis["tokens"].tolist()[:-1]] for hypothesis in best]
    for hypothesis, scored in zip(best, ct2.score_batch(sources, words)):
        assert scored.log_probs == pytest.approx(hypothesis["positional_scores"].tolist(), abs=1e-4)


VARIANTS = {
    # the paper's: post-norm, sinusoids, separate embeddings; here with separate dictionaries of other sizes
    "paper": dict(separate_target=True),
    "shared all embeddings": dict(share_all_embeddings=True),
    "shared decoder input and output": dict(share_decoder_input_output_embed=True),
    "pre-norm": dict(encoder_normalize_before=True, decoder_normalize_before=True),
    "learned positions (Table 3 E)": dict(encoder_learned_pos=True, decoder_learned_pos=True),
    "pre-norm encoder, d_k = d_v = 16 != d_model/h": dict(
        encoder_normalize_before=True, attention_key_dim=16, attention_value_dim=16
    ),
}
POSITIONS = 12  # --max-source-positions and --max-target-positions: the tables are used to their last row


@pytest.mark.parametrize("variant", VARIANTS)
def test_each_variant_computes_what_the_plugin_computes(variant, tmp_path):
    """A random model: CTranslate2's greedy output is the plugin's greedy search's, and its log-probabilities of
    those hypotheses are the plugin's forward pass's (softmax over every token but <pad>), to 1e-5."""
    options = dict(VARIANTS[variant])
    torch.manual_seed(0)
    source_dictionary = make_dictionary(20)
    target_dictionary = make_dictionary(27) if options.pop("separate_target", False) else source_dictionary
    model = build_model(
        source_dictionary, target_dictionary, max_source_positions=POSITIONS, max_target_positions=POSITIONS, **options
    ).eval()
    export_ctranslate2.export(model, source_dictionary, target_dictionary, tmp_path / "model")
    # The longest source fills the source table: POSITIONS - 1 words and </s>.
    src_tokens = random_tokens(
        source_dictionary, 3, POSITIONS, torch.Generator().manual_seed(1), lengths=[POSITIONS, 4, 7], left_pad=True
    )
    sources = [[source_dictionary[i] for i in row if i != source_dictionary.pad()][:-1] for row in src_tokens.tolist()]
    sample = {"net_input": {"src_tokens": src_tokens, "src_lengths": src_tokens.ne(source_dictionary.pad()).sum(1)}}
    # The plugin's limit: the length limit, at most POSITIONS - 1 words and </s> (the whole target table).
    generator = SequenceGenerator([model], target_dictionary, beam_size=1, max_len_b=POSITIONS)
    with torch.no_grad():
        hypotheses = [h[0]["tokens"].tolist() for h in generator.generate([model], sample)]
    words = [[target_dictionary[i] for i in tokens if i != target_dictionary.eos()] for tokens in hypotheses]

    ct2 = translator(tmp_path / "model")
    results = ct2.translate_batch(sources, beam_size=1, max_decoding_length=POSITIONS - 1, min_decoding_length=1)
    assert [result.hypotheses[0] for result in results] == words
    scored = ct2.score_batch(sources, words)
    for row, (tokens, result) in enumerate(zip(hypotheses, scored)):
        if tokens[-1] != target_dictionary.eos():
            tokens = tokens + [target_dictionary.eos()]  # score_batch scores the </s> after the words
        previous = torch.tensor([[target_dictionary.eos()] + tokens[:-1]])
        with torch.no_grad():
            logits, _ = model(src_tokens[row : row + 1], sample["net_input"]["src_lengths"][row : row + 1], previous)
        logits[..., target_dictionary.pad()] = -math.inf
        expected = torch.log_softmax(logits[0].double(), dim=-1)[torch.arange(len(tokens)), tokens]
        assert result.log_probs == pytest.approx(expected.tolist(), abs=1e-5)


def test_d_k_unequal_to_d_v_is_refused_in_one_line(tmp_path):
    dictionary = make_dictionary(20)
    model = build_model(dictionary, attention_key_dim=16, attention_value_dim=8)
    with pytest.raises(VaswaniConfigError, match=r"^the encoder has d_k = 16 and d_v = 8 .*needs d_k = d_v$"):
        export_ctranslate2.export(model, dictionary, dictionary, tmp_path / "model")
    assert not (tmp_path / "model").exists()


def test_command_writes_int8_and_refuses_to_overwrite(trained, exported, tmp_path, capsys):
    checkpoint, data, sources = trained
    command = [
        "--checkpoint",
        str(checkpoint),
        "--data",
        str(data),
        "--output",
        str(tmp_path / "int8"),
        "--quantization",
        "int8",
    ]
    export_ctranslate2.main(command)
    out = capsys.readouterr().out
    # what was exported: d_model, N (encoder/decoder), the norm's place, the vocabularies (source/target)
    (line,) = [line for line in out.splitlines() if f"{checkpoint} -> {tmp_path / 'int8'}: " in line]
    facts = line.split(f"{tmp_path / 'int8'}: ", 1)[1].split(";")[0]
    assert re.findall(r"\d+", facts) == ["32", "1", "2", "40", "40"] and "post-norm" in facts, line
    int8 = translator(tmp_path / "int8", compute_type="int8")
    float32 = translator(exported)
    greedy = dict(beam_size=1, max_decoding_length=200)
    agree = [
        a.hypotheses == b.hypotheses
        for a, b in zip(int8.translate_batch(sources, **greedy), float32.translate_batch(sources, **greedy))
    ]
    assert sum(agree) >= 0.9 * len(sources)
    with pytest.raises(SystemExit) as exit:
        export_ctranslate2.main(command)
    assert (
        exit.value.code == f"vaswani_plugin.serving.export_ctranslate2: error: {tmp_path / 'int8'} exists; "
        "choose another --output, or --force to replace it"
    )
    # The trained checkpoint, relabelled as fairseq's own `transformer`.
    fairseq_checkpoint = tmp_path / "fairseq.pt"
    state = torch.load(checkpoint, weights_only=True)
    state["cfg"]["model"]["_name"] = "transformer"
    torch.save(state, fairseq_checkpoint)
    with pytest.raises(SystemExit) as exit:
        export_ctranslate2.main(
            ["--checkpoint", str(fairseq_checkpoint), "--data", str(data), "--output", str(tmp_path / "other")]
        )
    assert (
        exit.value.code == "vaswani_plugin.serving.export_ctranslate2: error: --checkpoint "
        f"{fairseq_checkpoint} holds a 'transformer' model, not a vaswani_transformer (a fairseq transformer: convert "
        "it first with python -m vaswani_plugin.checkpoints.convert_fairseq)"
    )


def test_translate_command_reads_and_writes_raw_text_as_fairseq_interactive(
    trained, exported, tmp_path, monkeypatch, capsys
):
    """Moses tokens, BPE, beam 4 with fairseq's --lenpen 1, joined and detokenised: the hub's (fairseq-
    interactive's) translations of the same raw lines; an empty line stays empty."""
    checkpoint, data, sources = trained
    codes = tmp_path / "codes"
    codes.write_text(BPE_CODES)
    lines = [" ".join(words) for words in sources[:20]] + RAW
    monkeypatch.setattr("sys.stdin", io.StringIO("\n".join(lines[:10] + [""] + lines[10:]) + "\n"))
    translate_ctranslate2.main(
        [
            "--model",
            str(exported),
            "--source-lang",
            "src",
            "--target-lang",
            "tgt",
            "--bpe-codes",
            str(codes),
            "--threads",
            "1",
            "--batch-size",
            "8",
            "--parallel-batches",
            "2",
        ]
    )
    captured = capsys.readouterr()
    hub = VaswaniTransformerModel.from_pretrained(
        str(checkpoint.parent),
        checkpoint_file=checkpoint.name,
        data_name_or_path=str(data),
        tokenizer="moses",
        moses_no_escape=True,
        bpe="subword_nmt",
        bpe_codes=str(codes),
    )
    expected = hub.translate(lines, beam=4)
    assert captured.out.splitlines() == expected[:10] + [""] + expected[10:]
    assert re.search(
        r"^translated 23 lines in \d+\.\d s \(.* lines/s; beam 4, compute type float32\)$", captured.err, re.M
    )
    # Moses split the punctuation off, BPE rebuilt w12 whole (the dictionary knows w12, not "," or ".").
    pipeline = translate_ctranslate2.TextPipeline("src", "tgt", bpe_codes=codes)
    assert pipeline.encode(RAW[0]) == ["w3", "w12", ",", "w4", "."]


def test_only_the_ctranslate2_commands_import_it():
    """`import vaswani_plugin` never needs the [ctranslate2] extra: ctranslate2 is imported by the two commands'
    modules alone, and no other module of the package imports them."""
    package = Path(vaswani_plugin.__file__).parent
    importers = {}
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else [node.module]
                if isinstance(node, ast.ImportFrom) and node.module
                else []
            )
            for name in names:
                importers.setdefault(name.split(".")[0] if name.startswith("ctranslate2") else name, set()).add(
                    path.relative_to(package).as_posix()
                )
    assert importers["ctranslate2"] == {"serving/export_ctranslate2.py", "serving/translate_ctranslate2.py"}
    assert "vaswani_plugin.serving.export_ctranslate2" not in importers
    assert "vaswani_plugin.serving.translate_ctranslate2" not in importers


def test_input_beyond_the_position_table_is_a_one_line_error(tmp_path, monkeypatch):
    dictionary = make_dictionary(20)
    model = build_model(dictionary, max_source_positions=POSITIONS, max_target_positions=POSITIONS).eval()
    export_ctranslate2.export(model, dictionary, dictionary, tmp_path / "model")
    codes = tmp_path / "codes"
    codes.write_text(BPE_CODES)
    monkeypatch.setattr("sys.stdin", io.StringIO("w1 w2\n" + " ".join(["w3"] * POSITIONS) + "\n"))
    with pytest.raises(SystemExit) as exit:
        translate_ctranslate2.main(
            [
                "--model",
                str(tmp_path / "model"),
                "--source-lang",
                "src",
                "--target-lang",
                "tgt",
                "--bpe-codes",
                str(codes),
                "--threads",
                "1",
            ]
        )
    assert re.fullmatch(
        rf"vaswani_plugin.serving.translate_ctranslate2: error: line 2 \({POSITIONS} subwords, the "
        rf"longest of "
        rf"its batch of 2\): No position encodings are defined for positions >= {POSITIONS}, but got "
        rf"position {POSITIONS}",
        exit.value.code,
    )


def test_text_pipeline_is_moses_and_subwords_both_ways(tmp_path):
    """Subword-nmt: "@@ " joined, then Moses' detokeniser (punctuation attached, "@-@" rejoined); sentencepiece
    (the En-Fr recipe's, over Moses tokens): a round trip gives the raw sentence back."""
    codes = tmp_path / "codes"
    codes.write_text(BPE_CODES)
    bpe = translate_ctranslate2.TextPipeline("en", "de", bpe_codes=codes)
    assert bpe.decode("Die Haus@@ tür @-@ Farbe ist ( sehr ) rot .".split()) == "Die Haustür-Farbe ist (sehr) rot."
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("A man ( in an orange hat ) stares at something .\nTwo dogs play in the snow .\n" * 20)
    sentencepiece.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(tmp_path / "spm"), vocab_size=30, minloglevel=2
    )
    spm = translate_ctranslate2.TextPipeline("en", "en", sentencepiece_model=tmp_path / "spm.model")
    raw = "A man (in an orange hat) stares at something."
    pieces = spm.encode(raw)
    assert "(" in "".join(pieces) and len(pieces) > len(raw.split())
    assert spm.decode(pieces) == raw


def test_length_limit_is_fairseqs():
    """fairseq's limit: max_len_a x the batch's source width (its longest source and </s>) + max_len_b tokens."""
    options = translate_ctranslate2.decoding_options(
        [["a"] * 3, ["b"] * 5], beam=4, length_penalty=1.0, max_len_a=1.5, max_len_b=2
    )
    assert options["max_decoding_length"] == int(1.5 * 6 + 2)
    assert options["min_decoding_length"] == 1 and options["max_input_length"] == 0


@pytest.mark.parametrize("module", ["serving.export_ctranslate2", "serving.translate_ctranslate2"])
def test_without_ctranslate2_the_commands_say_how_to_install_it(module, monkeypatch):
    """An ImportError to code that imports them; from `python -m`, the plugin's error hook prints it in one line
    (a VaswaniConfigError)."""
    monkeypatch.setitem(sys.modules, "ctranslate2", None)
    monkeypatch.delitem(sys.modules, f"vaswani_plugin.{module}")
    with pytest.raises(
        ImportError, match=r'^this needs the package ctranslate2: pip install -e "\.\[ctranslate2\]"'
    ) as error:
        importlib.import_module(f"vaswani_plugin.{module}")
    assert isinstance(error.value, VaswaniConfigError)

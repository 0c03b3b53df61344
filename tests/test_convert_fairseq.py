"""Converting fairseq `transformer` checkpoints: the converted model computes the same log-probabilities and
finds the same beam-search hypotheses as the original (issue: speed must be compared on the same computation)."""

from argparse import Namespace

import pytest
import torch
from cli_helpers import TINY_MODEL, run
from doc_blocks import block, run_here
from fairseq import checkpoint_utils

from vaswani_plugin.checkpoints.convert_fairseq import main

FAIRSEQ_TRAINING = [
    "--optimizer",
    "adam",
    "--lr",
    "0.005",
    "--lr-scheduler",
    "inverse_sqrt",
    "--warmup-updates",
    "5",
    "--criterion",
    "label_smoothed_cross_entropy",
    "--label-smoothing",
    "0.1",
    "--max-tokens",
    "1000",
    "--cpu",
    "--seed",
    "1",
    "--required-batch-size-multiple",
    "1",
    "--max-update",
    "30",
    "--no-epoch-checkpoints",
    "--log-format",
    "simple",
]
# fairseq's layouts the converter covers: learned positions with shared embeddings (post-norm, the paper's), and
# fairseq's sinusoids with separate dictionaries and pre-norm (its final LayerNorms).
VARIANTS = {
    "learned_positions": ("joined", ["--share-all-embeddings", "--encoder-learned-pos", "--decoder-learned-pos"]),
    "sinusoids_prenorm": (
        "separate",
        ["--share-decoder-input-output-embed", "--encoder-normalize-before", "--decoder-normalize-before"],
    ),
}


@pytest.fixture(scope="module", params=list(VARIANTS))
def converted(request, reversal_data, tmp_path_factory):
    """A fairseq transformer trained for 30 updates, and its conversion by the command line."""
    data_name, options = VARIANTS[request.param]
    root = tmp_path_factory.mktemp(request.param)
    data = reversal_data / data_name
    run(
        "train",
        data,
        "--arch",
        "transformer",
        *TINY_MODEL,
        *options,
        *FAIRSEQ_TRAINING,
        "--save-dir",
        root / "fairseq",
        cwd=root,
    )
    # docs/reference.md's command as written, in this folder (in this process: no 4.5 s start-up of fairseq).
    status, out, err = run_here(block("docs/reference.md", "test:convert-fairseq"), root)
    assert status == 0, err
    assert "vaswani_transformer, d_model 32" in out
    return data, root / "fairseq" / "checkpoint_best.pt", root / "vaswani.pt"


def load(path, data):
    (model,), _, task = checkpoint_utils.load_model_ensemble_and_task([str(path)], arg_overrides={"data": str(data)})
    return model.eval(), task


def test_same_log_probabilities(converted):
    data, original_path, converted_path = converted
    original, task = load(original_path, data)
    ours, _ = load(converted_path, data)
    assert type(ours).__name__ == "VaswaniTransformerModel" and type(original).__name__ == "TransformerModel"
    task.load_dataset("test")
    batch = next(
        task.get_batch_iterator(task.dataset("test"), max_sentences=64, required_batch_size_multiple=1).next_epoch_itr(
            shuffle=False
        )
    )
    with torch.no_grad():
        expected = original.get_normalized_probs(original(**batch["net_input"]), log_probs=True)
        actual = ours.get_normalized_probs(ours(**batch["net_input"]), log_probs=True)
    keep = batch["target"].ne(task.target_dictionary.pad())
    assert keep.sum() > 100 and (batch["net_input"]["src_tokens"] == 1).any()  # padded batch, many tokens
    assert (actual - expected)[keep].abs().max().item() <= 1e-5
    # A trained model: the log-probabilities are far from uniform, so agreement is not trivial.
    assert expected[keep].max(dim=-1).values.mean().exp() > 2.0 / len(task.target_dictionary)


def hypotheses(path, data):
    """Beam 4 over the whole test split, in fairseq's SequenceGenerator: {id: (score, tokens)}."""
    model, task = load(path, data)
    task.load_dataset("test")
    generator = task.build_generator([model], Namespace(beam=4))
    found = {}
    for batch in task.get_batch_iterator(
        task.dataset("test"), max_sentences=16, required_batch_size_multiple=1
    ).next_epoch_itr(shuffle=False):
        with torch.no_grad():
            for i, best in zip(batch["id"].tolist(), task.inference_step(generator, [model], batch)):
                found[i] = (best[0]["score"].item(), best[0]["tokens"].tolist())
    return found


def test_same_beam_search_hypotheses(converted):
    data, original_path, converted_path = converted
    expected, actual = hypotheses(original_path, data), hypotheses(converted_path, data)
    assert len(expected) == 103 and expected.keys() == actual.keys()
    assert {i: tokens for i, (_, tokens) in actual.items()} == {i: tokens for i, (_, tokens) in expected.items()}
    for i, (score, _) in expected.items():
        assert actual[i][0] == pytest.approx(score, abs=1e-5)


def test_features_the_model_lacks_are_refused_by_name(converted, tmp_path):
    _, original_path, converted_path = converted
    state = torch.load(original_path, weights_only=True)
    state["cfg"]["model"].layernorm_embedding = True
    torch.save(state, tmp_path / "layernorm_embedding.pt")
    for path, message in (
        (
            tmp_path / "layernorm_embedding.pt",
            "the checkpoint uses --layernorm-embedding (True), which vaswani_transformer does not have",
        ),
        (converted_path, "not a checkpoint of fairseq's transformer (its model is 'vaswani_transformer')"),
        (tmp_path / "missing.pt", "not a checkpoint file"),
    ):
        with pytest.raises(SystemExit) as exit:
            main(["--input", str(path), "--output", str(tmp_path / "out.pt")])
        assert exit.value.code == f"vaswani_plugin.checkpoints.convert_fairseq: error: {path}: {message}"
    assert not (tmp_path / "out.pt").exists()

"""tasks/dev_scores.py: the dev set's BLEU and F1 while training. The BLEU a validation logs, summed batch by batch,
is the BLEU of fairseq-generate's output for the same sentences scored by scoring/bleu.py; the F1 from summed
bracket counts is EVALB's (scoring/evalb.py) on the same trees."""

import json
from argparse import Namespace

import pytest
from cli_helpers import REPO, run
from fairseq import checkpoint_utils
from fairseq.logging import metrics

from vaswani_plugin.errors import VaswaniConfigError
from vaswani_plugin.scoring.bleu import read_hypotheses, score_lines
from vaswani_plugin.scoring.evalb import COLLINS, evaluate
from vaswani_plugin.scoring.parses import parse_trees
from vaswani_plugin.tasks.dev_scores import DevScoring, of_the_valid_split, subset_ids
from vaswani_plugin.tasks.vaswani_translation import VaswaniTranslationConfig, VaswaniTranslationTask

DECODING = {"beam": 4, "max_len_a": 1, "max_len_b": 5}
SENTENCES = 40  # of the reversal corpus' 101 valid sentences


def dev_task(data, reversal_data, **settings):
    settings = dict(
        dict(
            data=str(data),
            source_lang="src",
            target_lang="tgt",
            dataset_impl="mmap",
            required_seq_len_multiple=1,
            train_subset="train",
            search="paper",
            gnmt_alpha=0.6,
            dev_score="bleu",
            dev_score_reference=str(reversal_data / "valid.tgt"),
            dev_score_args=json.dumps(DECODING),
        ),
        **settings,
    )
    return VaswaniTranslationTask.setup_task(VaswaniTranslationConfig(**settings))


def test_the_logged_bleu_is_fairseq_generates_scored(trained, reversal_data, tmp_path):
    checkpoint, data, _ = trained
    task = dev_task(data, reversal_data, dev_score_sentences=SENTENCES)
    (model,), _ = checkpoint_utils.load_model_ensemble([str(checkpoint)], task=task)
    model.eval()
    criterion = task.build_criterion(checkpoint_utils.load_checkpoint_to_cpu(str(checkpoint))["cfg"].criterion)
    task.load_dataset("valid")
    task.dev_scoring.before_training_step(0)  # as fairseq-train's first step: the references read
    task.updates_done = 1
    batches = task.get_batch_iterator(
        dataset=task.dataset("valid"), max_tokens=50, max_positions=(1024, 1024)
    ).next_epoch_itr(shuffle=False)
    with metrics.aggregate(new_root=True) as aggregate:
        for count, sample in enumerate(batches, 1):  # noqa: B007  (count read after the loop)
            _, _, logged = task.valid_step(sample, model, criterion)
            task.reduce_metrics([logged], criterion)  # one batch at a time, as fairseq's trainer
        values = aggregate.get_smoothed_values()
    assert count > 3  # the statistics of several batches summed
    # fairseq's stand-in batch (the first training batch, for a worker whose share of the split is done): not
    # decoded, counted as nothing.
    task.load_dataset("train")
    for stand_in in task.get_batch_iterator(
        dataset=task.dataset("train"), max_tokens=50, max_positions=(1024, 1024)
    ).next_epoch_itr(shuffle=False):
        assert not of_the_valid_split(task, stand_in)
        counted = task.dev_scoring.statistics(task, stand_in, model, 1)
        assert counted["_dev_sentences"] == 0 and set(counted) == {key for key in logged if key.startswith("_dev_")}

    output = tmp_path / "generate.txt"
    result = run(
        "generate",
        data,
        "--user-dir",
        REPO / "vaswani_plugin",
        "--task",
        "vaswani_translation",
        "--path",
        checkpoint,
        "--gen-subset",
        "valid",
        "--dev-score-sentences",
        SENTENCES,
        "--search",
        "paper",
        "--gnmt-alpha",
        "0.6",
        *[f"--{k.replace('_', '-')}={v}" for k, v in DECODING.items()],
        "--batch-size",
        "64",
        "--required-batch-size-multiple",
        "1",
        "--cpu",
        cwd=tmp_path,
    )
    output.write_text(result.stdout)
    hypotheses, ids = read_hypotheses(output)
    assert ids == subset_ids(101, SENTENCES).tolist()  # the same fixed subset, spread over the split
    references = (reversal_data / "valid.tgt").read_text().splitlines()
    scores = score_lines(hypotheses, [references[i] for i in ids], "tgt")
    assert 20 < scores.sacrebleu < 100  # a model that translates: the check compares real numbers
    assert values["dev_sentences"] == SENTENCES
    assert (values["bleu"], values["tok_bleu"]) == (round(scores.sacrebleu, 2), round(scores.tokenised_bleu, 2))


def test_f1_from_summed_bracket_counts_is_evalbs(tmp_path):
    words = ["The cat sat .", "Dogs bark", "I saw her duck"]
    tags = ["DT NN VBD .", "NNS VBP", "PRP VBD PRP NN"]
    gold = [
        "(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .)))",
        "(TOP (S (NP (NNS Dogs)) (VP (VBP bark))))",
        "(TOP (S (NP (PRP I)) (VP (VBD saw) (NP (PRP her) (NN duck)))))",
    ]
    outputs = [
        "(S (NP The cat )NP (VP sat )VP . )S",
        "(S (VP Dogs (VP bark )VP )VP )S",
        "(S (NP I )NP (VP saw (S (NP her )NP duck )S )VP )S",
    ]  # 11 brackets against the gold 10
    for name, lines in (("text/valid.words", words), ("gold/valid.tags", tags), ("gold/valid.trees", gold)):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text("\n".join(lines) + "\n")
    scoring = DevScoring(
        Namespace(
            dev_score="f1",
            dev_score_interval_updates=0,
            dev_score_sentences=0,
            dev_score_reference=str(tmp_path),
            dev_score_args="{}",
            dev_score_post_process=None,
        ),
        None,
    )
    scoring.before_training_step(0)
    batches = [scoring.counts([0, 2], [outputs[0], outputs[2]]), scoring.counts([1], [outputs[1]])]
    with metrics.aggregate(new_root=True) as aggregate:
        for logged in batches:
            scoring.log([logged], metrics)
        f1 = aggregate.get_smoothed_values()["f1"]
    trees, _ = parse_trees(outputs, words, tags)
    _, everything, _ = evaluate(gold, trees, COLLINS)
    assert 0 < everything.f1 < 100
    assert f1 == round(everything.f1, 2)


def test_scores_at_the_first_validation_after_each_interval():
    scoring = DevScoring(
        Namespace(
            dev_score="bleu",
            dev_score_interval_updates=500,
            dev_score_sentences=0,
            dev_score_reference=None,
            dev_score_args="{}",
            dev_score_post_process=None,
        ),
        "de",
    )
    scoring.texts = {}  # nothing read: this test decides only when
    scored = []
    for update in range(1, 2001):  # a validation at each checkpoint, every 150 updates
        scoring.before_training_step(update - 1)
        if update % 150 == 0 and scoring.due(update):
            scored.append(update)
            scoring.scored_at = update
    assert scored == [600, 1050, 1500]  # the first checkpoint at or after 500, 1,000 and 1,500 (2,000: none after)


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"dev_score": "blue"}, "--dev-score blue: choose one of none, bleu, f1"),
        ({"dev_score_args": "beam 4"}, "--dev-score-args 'beam 4': not a JSON object"),
    ],
)
def test_bad_settings_are_one_line_errors(settings, message, reversal_data):
    with pytest.raises(VaswaniConfigError, match=message):
        dev_task(reversal_data / "joined", reversal_data, **settings)


def test_a_missing_reference_stops_the_first_step_not_the_first_scoring(reversal_data):
    task = dev_task(reversal_data / "joined", reversal_data, dev_score_reference=str(reversal_data / "nothing"))
    with pytest.raises(VaswaniConfigError, match=r"--dev-score bleu: .*nothing is not a file \(--dev-score-reference"):
        task.dev_scoring.before_training_step(0)

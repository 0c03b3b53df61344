"""fairseq's hub interface, VaswaniTransformerModel.from_pretrained(...).translate(...), on the tiny reversal model
of tests/conftest.py (fairseq's --task translation), checked against fairseq-interactive with the same options;
and the README's `<!-- test:hub -->` block run as written, its paths and sentence replaced by the reversal model's.

What the hub takes (fairseq's hub_utils.from_pretrained): keyword arguments override the checkpoint's saved
config by name, in every section that has that name. A plain `task="vaswani_translation"` matches no field and
changes nothing; a dict replaces fields of the task section itself, so
`task={"_name": "vaswani_translation", "data": DATA, "gnmt_alpha": 0.6}` is --task vaswani_translation
--gnmt-alpha 0.6, whatever task the checkpoint was trained with. The dict is all the task section gets: `data`
must be in it, or the task reads the dictionaries from where the model was trained.
"""

import math
import re
import shutil

import pytest
from cli_helpers import plugin_dir, run
from doc_blocks import block, run_shell, substituted
from fairseq import hub_utils
from fairseq.tasks.translation import TranslationTask

from vaswani_plugin.models.vaswani_transformer import VaswaniTransformerModel
from vaswani_plugin.tasks.vaswani_translation import VaswaniTranslationTask

# subword-nmt codes (version 0.2: </w> ends a word) that rebuild every source word w0..w14 whole; with no merges
# BPE would split w12 into w@@ 1@@ 2, which the dictionary does not know.
BPE_CODES = (
    "#version: 0.2\n"
    + "".join(f"w {i}</w>\n" for i in range(10))
    + "w 1\n"
    + "".join(f"w1 {i}</w>\n" for i in range(5))
)
# Short outputs: the 6-update model rarely ends a sentence before the limit. Raw text: Moses splits off the
# punctuation (read as <unk>), as the quickstart's sentences are tokenised.
OPTIONS = dict(beam=4, max_len_a=1, max_len_b=3)
RAW = ["w3 w12, w4.", "w7 (w11) w0!"]
GNMT = {"_name": "vaswani_translation", "gnmt_alpha": 0.6}


@pytest.fixture(scope="module")
def model_files(reversal_data, reversal_training, tmp_path_factory):
    """(checkpoint folder, data-bin, BPE codes, test sentences) of the tiny reversal model."""
    save_dir, _ = reversal_training
    codes = tmp_path_factory.mktemp("bpe") / "codes"
    codes.write_text(BPE_CODES)
    sentences = (reversal_data / "test.src").read_text().splitlines()
    return save_dir, reversal_data / "joined", codes, sentences


def load_hub(model_files, data=None, **overrides):
    save_dir, joined, codes, _ = model_files
    return VaswaniTransformerModel.from_pretrained(
        str(save_dir),
        checkpoint_file="checkpoint_last.pt",
        data_name_or_path=str(data or joined),
        tokenizer="moses",
        moses_no_escape=True,
        bpe="subword_nmt",
        bpe_codes=str(codes),
        **overrides,
    )


def interactive(model_files, sentences, *options, data=None, cwd):
    """fairseq-interactive on raw text with the hub's tokenizer and BPE: per sentence (score in base 2, D- text)."""
    save_dir, joined, codes, _ = model_files
    result = run(
        "interactive",
        data or joined,
        "--user-dir",
        plugin_dir(),
        "--path",
        save_dir / "checkpoint_last.pt",
        "--source-lang",
        "src",
        "--target-lang",
        "tgt",
        "--tokenizer",
        "moses",
        "--moses-no-escape",
        "--bpe",
        "subword_nmt",
        "--bpe-codes",
        codes,
        "--beam",
        str(OPTIONS["beam"]),
        "--max-len-a",
        str(OPTIONS["max_len_a"]),
        "--max-len-b",
        str(OPTIONS["max_len_b"]),
        "--cpu",
        *options,
        cwd=cwd,
        stdin="".join(f"{sentence}\n" for sentence in sentences),
    )
    found = {int(m[1]): (float(m[2]), m[3]) for m in re.finditer(r"^D-(\d+)\t(\S+)\t(.*)$", result.stdout, re.M)}
    assert sorted(found) == list(range(len(sentences))), result.stdout[-2000:]
    return [found[i] for i in range(len(sentences))]


def hub_scores(hub, sentences, **options):
    """The best hypothesis' score of each sentence, in base 2 as fairseq-interactive prints it."""
    batches = hub.generate([hub.encode(sentence) for sentence in sentences], **{**OPTIONS, **options})
    return [hypotheses[0]["score"].item() / math.log(2) for hypotheses in batches]


def test_translations_equal_fairseq_interactives(model_files, tmp_path):
    """One sentence at a time, as fairseq-interactive reads them (its --buffer-size 1)."""
    sentences = model_files[3][:10] + RAW
    hub = load_hub(model_files)
    assert type(hub.task) is TranslationTask  # the checkpoint's own task
    expected = interactive(model_files, sentences, cwd=tmp_path)
    translations = [hub.translate(sentence, **OPTIONS) for sentence in sentences]
    assert translations == [text for _, text in expected]
    assert len(set(translations)) > 3  # different sentences, different outputs: the comparison can tell
    scores = [hub_scores(hub, [sentence])[0] for sentence in sentences]
    assert scores == pytest.approx([score for score, _ in expected], abs=1e-5)
    # Moses split the punctuation off and BPE rebuilt the words: w3 w12 , w4 . (the two marks are unknown).
    assert hub.string(hub.encode(RAW[0])) == "w3 w12 <unk> w4 <unk>"


def test_gnmt_alpha_as_a_task_override_equals_fairseq_interactives(model_files, tmp_path):
    """task={...} makes the checkpoint's translation task vaswani_translation with --gnmt-alpha 0.6, reading the
    dictionaries from `data` (a copy, elsewhere). A list of sentences is translated in batches of the checkpoint's
    --max-tokens, and --max-len-a counts the longest source of a batch: fairseq-interactive batches alike with
    --buffer-size and the same --max-tokens. Every sentence comes back, in order (103, no multiple of 8)."""
    data = shutil.copytree(model_files[1], tmp_path / "data-bin")
    sentences = model_files[3]
    hub = load_hub(model_files, data=data, task=dict(GNMT, data=str(data)))
    assert type(hub.task) is VaswaniTranslationTask and hub.task.cfg.gnmt_alpha == 0.6
    assert hub.task.cfg.data == str(data) and (hub.task.cfg.source_lang, hub.task.cfg.target_lang) == ("src", "tgt")
    max_tokens = hub.cfg.dataset.max_tokens
    assert max_tokens == 1000 and hub.cfg.dataset.batch_size is None  # the training run's, tests/cli_helpers.py
    expected = interactive(
        model_files,
        sentences,
        "--task",
        "vaswani_translation",
        "--gnmt-alpha",
        "0.6",
        "--buffer-size",
        str(len(sentences)),
        "--max-tokens",
        str(max_tokens),
        data=data,
        cwd=tmp_path,
    )
    assert hub.translate(sentences, **OPTIONS) == [text for _, text in expected]
    gnmt_scores = hub_scores(hub, sentences)
    assert gnmt_scores == pytest.approx([score for score, _ in expected], abs=1e-5)
    # The length penalty took effect: fairseq's own ranking scores the same sentences otherwise.
    plain_scores = hub_scores(load_hub(model_files, data=data), sentences)
    assert all(abs(gnmt - plain) > 1e-3 for gnmt, plain in zip(gnmt_scores, plain_scores))


def test_a_task_name_alone_changes_nothing(model_files):
    """fairseq overrides fields by name: `task` names a section, not a field, so the string is dropped silently,
    and gnmt_alpha has no field in fairseq's translation task to land in."""
    hub = load_hub(model_files, task="vaswani_translation", gnmt_alpha=0.6)
    assert type(hub.task) is TranslationTask and "gnmt_alpha" not in hub.task.cfg


# The README's quickstart paths -> the reversal model's; its English sentence -> a reversal sentence (Moses splits
# off the full stop, as it does the README's).
SENTENCE = "A little girl climbs into a wooden playhouse."
REVERSAL_SENTENCE = "w12 w0 w2 w14 w9."
LANGUAGES = {"en": "src", "de": "tgt"}


def test_the_readme_block_prints_what_fairseq_interactive_prints(model_files, tmp_path, monkeypatch, capsys):
    """Both of the README's ways to translate a sentence (shell, Python), run as written on the reversal model."""
    save_dir, joined, codes, _ = model_files
    paths = {
        "work/quickstart/data/data-bin": str(joined),
        "work/quickstart/data/bpe/codes": str(codes),
        "checkpoint_average.pt": "checkpoint_last.pt",
        SENTENCE: REVERSAL_SENTENCE,
    }
    script = substituted(block("README.md", "test:hub"), {**paths, "work/quickstart/checkpoints": str(save_dir)})
    # The hub's languages (keyword arguments) and fairseq-interactive's (options) become the reversal pair.
    script = re.sub(r'\b(source_lang|target_lang)="(en|de)"', lambda m: f'{m[1]}="{LANGUAGES[m[2]]}"', script)
    assert "work/quickstart" not in script, script
    # The script runs here, as a user's script would; the hub's beam search reports its best score, in base 2 as
    # fairseq-interactive's D- line.
    scores, generate = [], hub_utils.GeneratorHubInterface.generate

    def reporting_generate(self, *args, **kwargs):
        outputs = generate(self, *args, **kwargs)
        scores.extend(hypotheses[0]["score"].item() / math.log(2) for hypotheses in outputs)
        return outputs

    monkeypatch.setattr(hub_utils.GeneratorHubInterface, "generate", reporting_generate)
    monkeypatch.chdir(tmp_path)
    exec(compile(script, "README.md, the block after <!-- test:hub -->", "exec"), {"__name__": "__main__"})
    printed = capsys.readouterr().out.splitlines()[-1]
    (score,) = scores

    command = substituted(
        block("README.md", "test:interactive"),
        {
            **paths,
            "work/quickstart/checkpoints/": f"{save_dir}/",
            "--source-lang en --target-lang de": "--source-lang src --target-lang tgt",
        },
    )
    assert "work/quickstart" not in command, command
    shell = run_shell(command, tmp_path)
    assert shell.returncode == 0, shell.stderr[-3000:]
    assert re.findall(r"^S-0\t(.*)$", shell.stdout, re.M) == ["w12 w0 w2 w14 w9 <unk>"]
    ((expected_score, expected),) = re.findall(r"^D-0\t(\S+)\t(.*)$", shell.stdout, re.M)
    assert printed == expected and expected
    # The same options too (beam, length penalty, maximum length): the same score.
    assert float(score) == pytest.approx(float(expected_score), abs=1e-5)

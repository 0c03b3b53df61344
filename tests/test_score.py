"""`python -m vaswani_plugin.scoring.bleu`: tokenised compound-split BLEU (§6.1, Table 2) and sacreBLEU."""

import math
import subprocess
import sys
from collections import Counter

import pytest

from vaswani_plugin.errors import VaswaniConfigError
from vaswani_plugin.scoring.bleu import read_hypotheses, score_files, score_lines, split_compounds

REFERENCES = [
    "Das Meeres-Ufer ist 3-mal so lang wie gestern.",
    '"Wir kommen morgen", sagte die Bundes-Regierung.',
    "Er kauft Äpfel, Birnen und Pflaumen.",
]
HYPOTHESES = [
    "Das Meeres-Ufer ist 2-mal so lang wie heute.",
    '"Wir kommen", sagte die Regierung am Morgen.',
    "Er kauft Äpfel und Birnen.",
]
# The same, Moses-tokenised and compound-split by hand.
HYPOTHESES_PREPARED = [
    "Das Meeres ##AT##-##AT## Ufer ist 2 ##AT##-##AT## mal so lang wie heute .",
    '" Wir kommen " , sagte die Regierung am Morgen .',
    "Er kauft Äpfel und Birnen .",
]
REFERENCES_PREPARED = [
    "Das Meeres ##AT##-##AT## Ufer ist 3 ##AT##-##AT## mal so lang wie gestern .",
    '" Wir kommen morgen " , sagte die Bundes ##AT##-##AT## Regierung .',
    "Er kauft Äpfel , Birnen und Pflaumen .",
]


def multi_bleu(hypotheses, references):
    """multi-bleu.perl, independently: clipped n-gram precisions, n = 1..4, brevity penalty, no smoothing."""
    matches, totals = [0] * 4, [0] * 4
    hyp_len = ref_len = 0
    for hypothesis, reference in zip(hypotheses, references):
        h, r = hypothesis.split(), reference.split()
        hyp_len, ref_len = hyp_len + len(h), ref_len + len(r)
        for n in range(1, 5):
            h_grams = Counter(tuple(h[i : i + n]) for i in range(len(h) - n + 1))
            r_grams = Counter(tuple(r[i : i + n]) for i in range(len(r) - n + 1))
            matches[n - 1] += sum(min(count, r_grams[gram]) for gram, count in h_grams.items())
            totals[n - 1] += max(len(h) - n + 1, 0)
    if 0 in matches:
        return 0.0
    brevity = min(1.0, math.exp(1 - ref_len / hyp_len))
    return 100 * brevity * math.exp(sum(math.log(m / t) for m, t in zip(matches, totals)) / 4)


def test_compound_splitting_as_get_ende_bleu_sh():
    assert split_compounds("am Meeres-Ufer") == "am Meeres ##AT##-##AT## Ufer"
    assert split_compounds("3-mal") == "3 ##AT##-##AT## mal"
    assert split_compounds("a - b -c d-") == "a - b -c d-"  # only between two non-spaces
    assert split_compounds("a-b-c") == "a ##AT##-##AT## b-c"  # Perl's s///g does not overlap either


def test_identical_hypotheses_score_100():
    scores = score_lines(REFERENCES, REFERENCES, "de")
    assert scores.tokenised_bleu == pytest.approx(100) and scores.sacrebleu == pytest.approx(100)
    # Moses-tokenised hypotheses are detokenised first: same scores.
    tokenised = score_lines(["Das Meeres-Ufer ist 3-mal so lang wie gestern .", *REFERENCES[1:]], REFERENCES, "de")
    assert tokenised.tokenised_bleu == pytest.approx(100) and tokenised.sacrebleu == pytest.approx(100)


def test_hand_computed_brevity_penalty():
    # Every n-gram matches; c = 4, r = 5: BLEU = exp(1 - 5/4) = 77.88
    scores = score_lines(["a b c d"], ["a b c d e"], "en")
    assert scores.tokenised_bleu == pytest.approx(100 * math.exp(1 - 5 / 4), abs=1e-9)


def test_tokenised_bleu_against_an_independent_count():
    expected = multi_bleu(HYPOTHESES_PREPARED, REFERENCES_PREPARED)
    assert 20 < expected < 80
    scores = score_lines(HYPOTHESES, REFERENCES, "de")
    assert scores.tokenised_bleu == pytest.approx(expected, abs=1e-9)
    # Without the compound split the counts differ, so the split is really applied.
    assert multi_bleu(
        [h.replace(" ##AT##-##AT## ", "-") for h in HYPOTHESES_PREPARED],
        [r.replace(" ##AT##-##AT## ", "-") for r in REFERENCES_PREPARED],
    ) != pytest.approx(expected)
    assert 0 < scores.sacrebleu < 100 and scores.sentences == 3
    assert scores.signature.startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:")


def generate_output(hypotheses, bpe=lambda text: text):
    """What fairseq-generate prints, ids out of order, two hypotheses (--nbest 2) per sentence."""
    lines = ["2024-01-01 | INFO | fairseq_cli.generate | loading model(s)"]
    for i in reversed(range(len(hypotheses))):
        text = bpe(hypotheses[i])
        lines += [
            f"S-{i}\tsource {i}",
            f"T-{i}\t{REFERENCES[i]}",
            f"H-{i}\t-0.5\t{text}",
            f"D-{i}\t-0.5\t{text}",
            f"P-{i}\t-0.5 -0.5",
            f"H-{i}\t-0.9\tworse",
            f"D-{i}\t-0.9\tworse",
            f"P-{i}\t-0.9 -0.9",
        ]
    return "\n".join(lines + ["Generate test with beam=4: BLEU4 = 10.00"]) + "\n"


def test_reads_fairseq_generate_output(tmp_path):
    (tmp_path / "generate.out").write_text(generate_output(HYPOTHESES))
    (tmp_path / "plain.txt").write_text("\n".join(HYPOTHESES) + "\n")
    (tmp_path / "ref.de").write_text("\n".join(REFERENCES) + "\n")
    assert read_hypotheses(tmp_path / "generate.out") == (HYPOTHESES, [0, 1, 2])
    from_generate = score_files(tmp_path / "generate.out", tmp_path / "ref.de", "de")
    assert from_generate == score_files(tmp_path / "plain.txt", tmp_path / "ref.de", "de")
    assert from_generate.tokenised_bleu == pytest.approx(multi_bleu(HYPOTHESES_PREPARED, REFERENCES_PREPARED))


@pytest.mark.parametrize(
    "name, bpe",
    [
        ("subword_nmt", lambda t: t.replace("Meeres", "Mee@@ res")),
        ("sentencepiece", lambda t: " ".join("\u2581" + w for w in t.split())),
    ],
)
def test_remove_bpe(tmp_path, name, bpe):
    (tmp_path / "generate.out").write_text(generate_output(HYPOTHESES, bpe))
    (tmp_path / "ref.de").write_text("\n".join(REFERENCES) + "\n")
    with pytest.raises(VaswaniConfigError, match=f"pass --remove-bpe {name}"):
        score_files(tmp_path / "generate.out", tmp_path / "ref.de", "de")
    assert read_hypotheses(tmp_path / "generate.out", name)[0] == HYPOTHESES


def score_command(*args, cwd):
    return subprocess.run(
        [sys.executable, "-m", "vaswani_plugin.scoring.bleu", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_command_prints_both_bleu_lines(tmp_path):
    (tmp_path / "generate.out").write_text(generate_output(HYPOTHESES))
    (tmp_path / "ref.de").write_text("\n".join(REFERENCES) + "\n")
    result = score_command("--hypotheses", "generate.out", "--reference", "ref.de", "--target-lang", "de", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    tokenised, sacrebleu, count = result.stdout.splitlines()
    scores = score_files(tmp_path / "generate.out", tmp_path / "ref.de", "de")
    assert tokenised.startswith(f"BLEU (tokenised, compound-split) = {scores.tokenised_bleu:.2f} ")
    assert sacrebleu.startswith(f"sacreBLEU = {scores.sacrebleu:.2f} ") and sacrebleu.endswith(scores.signature)
    assert count == "sentences = 3"


def test_a_missing_hypothesis_is_an_error_not_a_bleu(tmp_path):
    (tmp_path / "generate.out").write_text(generate_output(HYPOTHESES[:2]))
    (tmp_path / "plain.txt").write_text("\n".join(HYPOTHESES[:2]) + "\n")
    (tmp_path / "ref.de").write_text("\n".join(REFERENCES) + "\n")
    result = score_command(
        "--generate-output", "generate.out", "--reference", "ref.de", "--target-lang", "de", cwd=tmp_path
    )
    assert result.returncode == 1 and result.stdout == "" and "Traceback" not in result.stderr
    assert result.stderr.splitlines()[-1] == (
        "vaswani_plugin.scoring.bleu: error: 2 hypotheses for 3 reference lines "
        "(fairseq dropped some: pass --required-batch-size-multiple 1)"
    )
    with pytest.raises(VaswaniConfigError, match=r"^2 hypotheses for 3 reference lines$"):
        score_files(tmp_path / "plain.txt", tmp_path / "ref.de", "de")

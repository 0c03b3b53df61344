"""benchmarks/speed.py in seconds: its smoke mode (a tiny model on synthetic data) and its full mode on a tiny
binarised corpus; the real figures come from the full mode on real data, recorded in docs/results.md, not asserted."""

import importlib.util
import re
import subprocess
import sys

import pytest
import torch
from cli_helpers import REPO
from conftest import lane_job, reversal_corpus
from doc_blocks import block, commands, run_shell, substituted

from vaswani_plugin.models.output_layer_loss import chunk_logits_for

sys.path.insert(0, str(REPO / "benchmarks"))  # speed.py imports its neighbours by name, as when run from there

COLUMNS = ["train tok/s", "peak MB", "beam4 sent/s", "beam4 tok/s", "greedy sent/s", "greedy tok/s"]


def run_smoke(*options):
    return run_benchmark("--smoke", *options)


def run_benchmark(*options):
    result = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "speed.py"), *options], capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def check_table(output):
    rows = {}
    for name in ("transformer", "vaswani_transformer", "ratio plugin/fairseq"):
        (line,) = [line for line in output.splitlines() if re.match(rf"tiny +{re.escape(name)} +\d", line)]
        rows[name] = [float(x) for x in re.findall(r"\d+\.\d+", line)[: len(COLUMNS)]]
    assert all(value > 0 for row in rows.values() for value in row)
    for ours, theirs, ratio in zip(rows["vaswani_transformer"], rows["transformer"], rows["ratio plugin/fairseq"]):
        # The printed figures are rounded to 0.05: small ones (a loaded machine) move their ratio that much more.
        assert ratio == pytest.approx(ours / theirs, abs=0.01 + ratio * (0.05 / ours + 0.05 / theirs))
    # Converted weights: both implementations translate the same.
    assert "tiny   same hypotheses (beam 4 and greedy): yes" in output
    # Every generator: the plugin's search under fairseq's rule finds fairseq-generate's hypotheses; the paper's
    # rule its own, at least as good by the GNMT score on average (beam 4).
    generators = {}
    for name in (
        "transformer, fairseq's SequenceGenerator",
        "vaswani_transformer, fairseq's SequenceGenerator",
        "vaswani_transformer, --search fairseq",
        "vaswani_transformer, --search paper",
    ):
        (line,) = [line for line in output.splitlines() if line.startswith(f"tiny   {name} ")]
        generators[name] = line[len(f"tiny   {name}") :].split()
        assert all(float(x) > 0 for x in generators[name][:4])
    assert generators["transformer, fairseq's SequenceGenerator"][1:4:2] == ["1.00", "1.00"]
    assert generators["vaswani_transformer, --search fairseq"][4] == "yes"
    assert (
        float(generators["vaswani_transformer, --search paper"][5])
        >= float(generators["vaswani_transformer, --search fairseq"][5]) - 1e-4
    )
    # CTranslate2 on the exported plugin model, every export on 1 and 2 threads, with BLEU printed: float32 greedy
    # finds the plugin's hypotheses. (Beam 4 may not on these barely trained models: CTranslate2 keeps </s> out of
    # the first step before its softmax, fairseq after, so every CTranslate2 score gains log 1/(1 - P(</s> first)),
    # which, divided by the length, favours short hypotheses where that probability is large; docs/reference.md.)
    for weights in ("float32", "int8"):
        for threads in ("1 thread", "2 threads a batch", "2 batches at once, 1 thread each"):
            (line,) = [line for line in output.splitlines() if line.startswith(f"tiny   {weights} weights, {threads} ")]
            figures = line.split()[-7:]
            # Sentences a second, each beside its ratio to fairseq-generate's (two decimals: on a loaded machine
            # CTranslate2 on 2 threads has printed 0.00 beside 17.1 sentences/s).
            beam4_speed, beam4_ratio, greedy_speed, greedy_ratio = map(float, figures[:4])
            assert beam4_speed > 0 and greedy_speed > 0 and beam4_ratio >= 0 and greedy_ratio >= 0, line
            beam4, greedy, sentences = re.fullmatch(r"(\d+)/(\d+) of (\d+)", " ".join(figures[4:])).groups()
            if weights == "float32":
                assert greedy == sentences, line
    assert re.search(
        r"^tiny   BLEU, beam 4 .*: the plugin \d+\.\d\d, CTranslate2 float32 \d+\.\d\d, int8 \d+\.\d\d$", output, re.M
    )
    # Each length_penalty's count of the plugin's --search paper hypotheses, none above the sentences.
    (line,) = [line for line in output.splitlines() if "length_penalty" in line]
    counts, sentences = re.findall(r"(\d\.\d): (\d+)", line), int(line.rsplit(" of ", 1)[1].split()[0])
    assert [float(penalty) for penalty, _ in counts] == list(speed_module().CT2_LENGTH_PENALTIES), line
    assert all(int(count) <= sentences for _, count in counts), line


@lane_job
def speed_smoke_run(tmp_path_factory, lane):
    """The smoke mode on CPU: a self-contained subprocess of 16 s, on the second lane."""
    return run_smoke("--device", "cpu")


@pytest.mark.lane("speed_smoke_run")
def test_smoke_prints_both_implementations_ratios_and_same_hypotheses(lane):
    output = lane["speed_smoke_run"].result()
    assert output.startswith("device: CPU") and "fp32" in output
    assert "\nthe plugin's training precision: float32 (--bf16-autocast off)\n" in output  # the default
    assert f"{chunk_logits_for(torch.device('cpu')):,} logits" in output and "(by device)" in output
    assert float(re.search(r"([\d.]+) chunks per training batch", output)[1]) == 1.0
    check_table(output)


@lane_job
def speed_full_run(tmp_path_factory, lane):
    """docs/results.md's command on a tiny binarised corpus of its own, sizes and counts appended (the last
    counts) as a user would (25 s: on the second lane, which has the time)."""
    (command,) = commands(block("docs/results.md", "test:speed"))
    command = substituted(command, {"work/quickstart/data/data-bin": str(reversal_corpus(tmp_path_factory) / "joined")})
    result = run_shell(
        f"{command} --sizes tiny --device cpu --pretrain-steps 20 --max-tokens 512 --warmup 1 "
        "--updates 2 --sentences 16 --bf16-autocast --loss-chunk-logits 2000",
        REPO,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


@pytest.mark.lane("speed_full_run")
def test_full_mode_reads_binarised_data_and_trains_the_plugin_in_bf16_on_request(lane):
    output = lane["speed_full_run"].result()
    assert "\nthe plugin's training precision: bfloat16 autocast (--bf16-autocast on)\n" in output  # a bare option
    assert "2,000 logits" in output and "(--loss-chunk-logits)" in output
    assert float(re.search(r"the plugin's loss took (\d+\.\d) chunks per training batch", output).group(1)) > 1
    assert re.search(r"^tiny .*\b20 updates\b.*nll loss \d", output, re.M)  # --pretrain-steps 20
    check_table(output)  # generation starts from the same weights again: the same hypotheses


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU (the device tool); CI has none")
def test_smoke_on_gpu_with_amp_reports_mfu():
    output = run_smoke("--device", "cuda", "--amp")
    check_table(output)
    assert re.search(r"tiny +vaswani_transformer .* \d+\.\d%$", output, re.M)


def speed_module():
    spec = importlib.util.spec_from_file_location("speed", REPO / "benchmarks" / "speed.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def speed_main(*argv):
    """benchmarks/speed.py's main, in this process (its option checks come before any work)."""
    return speed_module().main(list(argv))


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--sizes", "small"], "--data DATA_BIN is needed"),
        (["--data", "{tmp_path}"], "no binarised train and test splits there"),
        (["--smoke", "--amp", "--bf16-autocast", "--device", "cuda"], "--amp and --bf16-autocast are two precisions"),
    ],
)
def test_bad_combinations_are_one_line_errors(argv, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit:
        speed_main(*(argument.format(tmp_path=tmp_path) for argument in argv))
    stderr = capsys.readouterr().err
    (line,) = stderr.strip().splitlines()[-1:]
    assert exit.value.code == 2 and line.startswith("benchmarks/speed.py: error: ") and message in line


def test_without_ctranslate2_one_line_unless_left_out(monkeypatch, capsys):
    """The GPU kit has no ctranslate2: speed.py says so in one line, and --no-ctranslate2 is the way round."""
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *args: None if name == "ctranslate2" else find_spec(name, *args)
    )
    with pytest.raises(SystemExit) as exit:
        speed_main("--smoke", "--device", "cpu")
    assert exit.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "benchmarks/speed.py: error: ctranslate2 is not installed (the [ctranslate2] extra): install it, or pass "
        "--no-ctranslate2"
    )


def test_pretraining_runs_on_the_measured_device(monkeypatch, tmp_path):
    """The weights generation starts from are trained on --device, the model and every batch moved there: on the
    GPU kit's H100 they were trained on its host's CPU, and 300 base updates outlasted speed.py's 4 minutes."""
    speed = speed_module()
    moved = []
    to = torch.nn.Module.to
    monkeypatch.setattr(
        torch.nn.Module, "to", lambda self, *args, **kwargs: moved.append(args) or to(self, *args, **kwargs)
    )
    batches = []
    to_device = speed.to_device
    monkeypatch.setattr(speed, "to_device", lambda sample, device: batches.append(device) or to_device(sample, device))
    speed.pretrain(
        dict(size="tiny", data=None, device="cpu", max_tokens=256, steps=2, pretrain_to=str(tmp_path / "tiny.pt"))
    )
    assert (torch.device("cpu"),) in moved and batches and set(batches) == {torch.device("cpu")}

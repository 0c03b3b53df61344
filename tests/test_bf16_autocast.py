"""--bf16-autocast auto|on|off of the vaswani_translation task: the forward pass under torch.autocast in bfloat16
(on this CPU), weights, loss and gradients in float32, and the same loss and gradients as float32 within bfloat16's
precision; and the one decision (vaswani_plugin.precision) that auto takes from the device, fairseq's own mixed
precision and the CPU's flags (faked here), which the task logs once as a `precision:` line."""

import logging

import pytest
import torch
from cli_helpers import NATIVE_BF16, REPO
from conftest import build_model, make_dictionary, random_tokens
from fairseq import options
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq.optim.amp_optimizer import AMPOptimizer
from fairseq.optim.fp16_optimizer import FP16Optimizer, MemoryEfficientFP16Optimizer

from vaswani_plugin import VaswaniConfigError, precision
from vaswani_plugin.criterions.vaswani_label_smoothed_cross_entropy import VaswaniLabelSmoothedCrossEntropy
from vaswani_plugin.precision import bf16_autocast_enabled, bf16_autocast_setting, cpu_flags, precision_line
from vaswani_plugin.tasks.vaswani_translation import VaswaniTranslationConfig, VaswaniTranslationTask

AVX2_ONLY = frozenset("fpu sse sse2 ssse3 sse4_1 sse4_2 avx avx2 fma".split())  # a CPU without native bfloat16
AVX512_BF16 = AVX2_ONLY | {"avx512f", "avx512_bf16"}
AMX = AVX512_BF16 | {"amx_bf16", "amx_tile"}


class PlainOptimizer:
    """The one method of fairseq's optimizer wrappers that train_step calls."""

    def backward(self, loss):
        loss.backward()


def tiny_batch(dictionary):
    """A training batch of 4 sentences, padded as fairseq collates them (sources on the left)."""
    generator = torch.Generator().manual_seed(0)
    source = random_tokens(dictionary, 4, 7, generator, left_pad=True, lengths=[7, 5, 6, 3])
    target = random_tokens(dictionary, 4, 6, generator, lengths=[6, 2, 4, 5])
    prev = torch.cat([torch.full((4, 1), dictionary.eos()), target[:, :-1]], dim=1)  # as fairseq collates it
    prev[target.eq(dictionary.pad())] = dictionary.pad()
    return {
        "net_input": {
            "src_tokens": source,
            "src_lengths": source.ne(dictionary.pad()).sum(1),
            "prev_output_tokens": prev,
        },
        "target": target,
        "ntokens": int(target.ne(dictionary.pad()).sum()),
    }


def training_step(bf16_autocast, optimizer=None):
    """One train_step of the task on a tiny model (no dropout, so both precisions see the same function).
    Returns the loss, the gradients by name, the parameters' dtypes and the dtypes the linear layers output."""
    dictionary = make_dictionary(20)
    torch.manual_seed(0)
    model = build_model(dictionary, dropout=0.0)
    task = VaswaniTranslationTask(VaswaniTranslationConfig(bf16_autocast=bf16_autocast), dictionary, dictionary)
    criterion = VaswaniLabelSmoothedCrossEntropy(task, label_smoothing=0.1, sentence_avg=False)
    sample = tiny_batch(dictionary)
    outputs = set()
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            module.register_forward_hook(lambda _module, _inputs, output: outputs.add(output.dtype))
    loss, _, _ = task.train_step(sample, model, criterion, optimizer or PlainOptimizer(), update_num=1)
    gradients = {name: parameter.grad for name, parameter in model.named_parameters()}
    return loss, gradients, {parameter.dtype for parameter in model.parameters()}, outputs


def test_products_run_in_bfloat16_and_the_rest_stays_float32():
    loss, gradients, parameters, outputs = training_step(bf16_autocast="on")
    assert outputs == {torch.bfloat16}
    assert loss.dtype == torch.float32 and parameters == {torch.float32}
    assert all(g.dtype == torch.float32 and torch.isfinite(g).all() for g in gradients.values())


def test_loss_and_gradients_match_float32_within_bfloat16_precision():
    loss32, gradients32, _, outputs32 = training_step(bf16_autocast="off")
    loss16, gradients16, _, _ = training_step(bf16_autocast="on")
    assert outputs32 == {torch.float32}  # without the option, the task trains as fairseq's translation does
    assert loss16.item() == pytest.approx(loss32.item(), rel=2e-3)
    flat32 = torch.cat([gradients32[name].flatten() for name in sorted(gradients32)])
    flat16 = torch.cat([gradients16[name].flatten() for name in sorted(gradients16)])
    assert torch.nn.functional.cosine_similarity(flat16, flat32, dim=0) > 0.99
    assert (flat16 - flat32).norm() < 0.05 * flat32.norm()


FAIRSEQ_OPTIMIZERS = {
    "--amp": AMPOptimizer,
    "--fp16": FP16Optimizer,
    "--memory-efficient-fp16": MemoryEfficientFP16Optimizer,
}  # what fairseq's options build


@pytest.mark.parametrize("option", FAIRSEQ_OPTIMIZERS)
def test_with_fairseqs_own_mixed_precision_it_is_a_one_line_error(option):
    optimizer = FAIRSEQ_OPTIMIZERS[option].__new__(FAIRSEQ_OPTIMIZERS[option])
    with pytest.raises(VaswaniConfigError, match="--bf16-autocast is a precision of its own: drop --fp16, --amp"):
        training_step(bf16_autocast="on", optimizer=optimizer)
    with pytest.raises(
        VaswaniConfigError, match="^--bf16-autocast is a precision of its own: drop --fp16, --amp and --bf16$"
    ):
        bf16_autocast_enabled("on", "cpu", option, flags=AMX)


# The decision, with the CPU's flags faked.


@pytest.mark.parametrize(
    "flags,enabled,reason",
    [
        (AVX2_ONLY, False, "--bf16-autocast auto: no native bfloat16 on this CPU"),
        (frozenset(), False, "--bf16-autocast auto: no native bfloat16 on this CPU"),  # no flags line (an ARM CPU)
        (AVX512_BF16, True, "--bf16-autocast auto: this CPU has avx512_bf16"),
        (AMX, True, "--bf16-autocast auto: this CPU has avx512_bf16 and amx_bf16"),
        (AVX2_ONLY | {"amx_bf16"}, True, "--bf16-autocast auto: this CPU has amx_bf16"),
    ],
)
def test_auto_is_on_only_on_a_cpu_that_multiplies_bfloat16_natively(flags, enabled, reason):
    assert bf16_autocast_enabled("auto", "cpu", flags=flags) == (enabled, reason)
    assert bf16_autocast_enabled("auto", torch.device("cpu"), flags=flags) == (enabled, reason)


def test_auto_is_off_on_a_gpu_and_beside_fairseqs_mixed_precision():
    for device in ("cuda", "cuda:1", torch.device("cuda", 0)):  # by the card's compute capability (faked)
        assert bf16_autocast_enabled("auto", device, flags=AVX2_ONLY, gpu=((8, 0), "A100")) == (
            True,
            "--bf16-autocast auto: A100, compute capability 8.0: bfloat16 tensor cores",
        )
        assert bf16_autocast_enabled("auto", device, flags=AMX, gpu=((7, 5), "T4")) == (
            False,
            "--bf16-autocast auto: T4, compute capability 7.5: float16 tensor cores, no bfloat16 ones (its mixed "
            "precision is fairseq's --fp16, which PRECISION=auto passes)",
        )
        assert bf16_autocast_enabled("auto", device, gpu=((6, 0), "P100")) == (
            False,
            "--bf16-autocast auto: P100, compute capability 6.0: no tensor cores for mixed precision, so float32",
        )
    assert bf16_autocast_enabled("auto", "mps") == (
        False,
        "--bf16-autocast auto: on for CPUs and GPUs only, and this is mps",
    )
    for option in FAIRSEQ_OPTIMIZERS:
        assert bf16_autocast_enabled("auto", "cpu", option, flags=AMX) == (
            False,
            f"--bf16-autocast auto: fairseq's {option} was chosen",
        )
        assert bf16_autocast_enabled("auto", "cuda", option) == (
            False,
            f"--bf16-autocast auto: fairseq's {option} was chosen",
        )


def test_on_and_off_are_what_they_say_on_any_device():
    for device in ("cpu", "cuda"):
        for flags in (AVX2_ONLY, AMX):
            assert bf16_autocast_enabled("on", device, flags=flags) == (True, "--bf16-autocast on")
            assert bf16_autocast_enabled("off", device, flags=flags) == (False, "--bf16-autocast off")
    assert bf16_autocast_enabled("off", "cuda", "--fp16") == (False, "--bf16-autocast off")


def test_auto_is_off_where_the_cpu_flags_cannot_be_read(monkeypatch):
    monkeypatch.setattr(precision.sys, "platform", "darwin")
    assert cpu_flags() is None
    assert bf16_autocast_enabled("auto", "cpu") == (False, "--bf16-autocast auto: no CPU flags to read on darwin")


def test_cpu_flags_are_read_from_proc_cpuinfo(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        "processor\t: 0\nflags\t\t: fpu avx2 avx512_bf16\nbugs\t\t: spectre_v1\n\n"
        "processor\t: 1\nflags\t\t: fpu avx2 avx512_bf16\n"
    )
    assert cpu_flags(str(cpuinfo)) == {"fpu", "avx2", "avx512_bf16"}
    assert cpu_flags(str(tmp_path / "missing")) is None


def test_this_machine_decides_as_its_proc_cpuinfo_says():
    """What the recipes' BF16=auto gives on this CPU (the quickstart's default): on where /proc/cpuinfo lists
    avx512_bf16 or amx_bf16, float32 elsewhere."""
    assert bf16_autocast_enabled("auto", "cpu")[0] == NATIVE_BF16


@pytest.mark.parametrize(
    "value,setting",
    [
        ("auto", "auto"),
        ("on", "on"),
        ("off", "off"),
        ("1", "on"),
        ("0", "off"),
        (1, "on"),
        (0, "off"),
        (True, "on"),
        (False, "off"),
        ("True", "on"),
        ("ON", "on"),
    ],
)  # True, False: a config of the former flag
def test_the_spellings_the_option_accepts(value, setting):
    assert bf16_autocast_setting(value) == setting


@pytest.mark.parametrize("value", ["yes", "", "2", "bf16"])
def test_a_bad_value_is_a_one_line_error_before_the_model_is_built(value):
    message = f"^--bf16-autocast {value}: use auto, on \\(1\\) or off \\(0\\)$"
    with pytest.raises(VaswaniConfigError, match=message):
        bf16_autocast_enabled(value, "cpu", flags=AMX)
    dictionary = make_dictionary(5)
    with pytest.raises(VaswaniConfigError, match=message):
        VaswaniTranslationTask(VaswaniTranslationConfig(bf16_autocast=value), dictionary, dictionary)


def test_precision_lines():
    assert (
        precision_line(True, "--bf16-autocast auto: this CPU has avx512_bf16")
        == "precision: bfloat16 autocast (--bf16-autocast auto: this CPU has avx512_bf16)"
    )
    assert (
        precision_line(False, "--bf16-autocast auto: no native bfloat16 on this CPU")
        == "precision: float32 (--bf16-autocast auto: no native bfloat16 on this CPU)"
    )
    assert (
        precision_line(False, "--bf16-autocast auto: fairseq's --fp16 was chosen", "--fp16")
        == "precision: fairseq's --fp16 (--bf16-autocast auto: fairseq's --fp16 was chosen)"
    )


# The task: decides at its first training step, from the model's device and fairseq's optimizer, and logs it once.


@pytest.mark.parametrize(
    "flags,outputs,line",
    [
        (AVX2_ONLY, {torch.float32}, "precision: float32 (--bf16-autocast auto: no native bfloat16 on this CPU)"),
        (
            AVX512_BF16,
            {torch.bfloat16},
            "precision: bfloat16 autocast (--bf16-autocast auto: this CPU has avx512_bf16)",
        ),
    ],
)
def test_the_task_decides_auto_once_and_logs_it(flags, outputs, line, monkeypatch, caplog):
    monkeypatch.setattr(precision, "cpu_flags", lambda: flags)
    caplog.set_level(logging.INFO, logger="vaswani_plugin.tasks.vaswani_translation")
    dictionary = make_dictionary(20)
    model = build_model(dictionary, dropout=0.0)
    task = VaswaniTranslationTask(VaswaniTranslationConfig(bf16_autocast="auto"), dictionary, dictionary)
    assert task.decide_bf16_autocast(model, PlainOptimizer()) == (outputs == {torch.bfloat16})
    assert task.decide_bf16_autocast(model, PlainOptimizer()) == (outputs == {torch.bfloat16})
    assert [record.getMessage() for record in caplog.records] == [line]
    assert training_step(bf16_autocast="auto")[3] == outputs


@pytest.mark.parametrize("option", FAIRSEQ_OPTIMIZERS)
def test_the_task_leaves_auto_off_beside_fairseqs_mixed_precision(option, monkeypatch, caplog):
    monkeypatch.setattr(precision, "cpu_flags", lambda: AMX)
    caplog.set_level(logging.INFO, logger="vaswani_plugin.tasks.vaswani_translation")
    dictionary = make_dictionary(20)
    model = build_model(dictionary, dropout=0.0)
    if option != "--amp":
        model = model.half()  # what fairseq's --fp16 trains
    task = VaswaniTranslationTask(VaswaniTranslationConfig(bf16_autocast="auto"), dictionary, dictionary)
    optimizer = FAIRSEQ_OPTIMIZERS[option].__new__(FAIRSEQ_OPTIMIZERS[option])
    assert task.decide_bf16_autocast(model, optimizer) is False
    assert [record.getMessage() for record in caplog.records] == [
        f"precision: fairseq's {option} (--bf16-autocast auto: fairseq's {option} was chosen)"
    ]


# The command line.


def parsed(*arguments):
    """fairseq-train's arguments parsed as fairseq-train parses them, before its configuration is composed."""
    parser = options.get_training_parser()
    return options.parse_args_and_arch(
        parser,
        [
            "data-bin",
            "--user-dir",
            str(REPO / "vaswani_plugin"),
            "--task",
            "vaswani_translation",
            "--arch",
            "vaswani_transformer",
            *arguments,
        ],
    )


def test_a_bare_option_means_on_and_none_off():
    """Each spelling as the parser reads it; the bare option's also through fairseq's configuration (hydra's
    composition, 0.7-1.5 s a call, once)."""
    assert parsed().bf16_autocast == "off"
    bare = parsed("--bf16-autocast")
    assert bare.bf16_autocast == "on" and convert_namespace_to_omegaconf(bare).task.bf16_autocast == "on"
    for value in ("auto", "on", "off", "1", "0"):
        assert parsed("--bf16-autocast", value).bf16_autocast == value


# The recipes' PRECISION: its spellings, what auto chooses by the card, what a checkpoint trained in, the command.


@pytest.mark.parametrize(
    "environ,setting,passed",
    [
        ({}, ("auto", "PRECISION unset"), None),
        ({"PRECISION": "bf16"}, ("bf16", "PRECISION=bf16"), "--bf16-autocast on"),
        ({"PRECISION": "fp32"}, ("fp32", "PRECISION=fp32"), "--bf16-autocast off"),
        ({"PRECISION": "TF32"}, ("tf32", "PRECISION=tf32"), "--bf16-autocast off --tf32"),
        ({"PRECISION": "amp"}, ("amp", "PRECISION=amp"), "--bf16-autocast off --amp"),
        ({"PRECISION": "fp16"}, ("fp16", "PRECISION=fp16"), "--bf16-autocast off --fp16"),
        ({"FP16": "1"}, ("fp16", "FP16=1"), "--bf16-autocast off --fp16"),
        ({"FP16": "1", "BF16": "0"}, ("fp16", "FP16=1"), "--bf16-autocast off --fp16"),
        ({"FP16": "0", "BF16": "0"}, ("fp32", "BF16=0"), "--bf16-autocast off"),  # BF16=0: float32 everywhere
        ({"BF16": "0"}, ("fp32", "BF16=0"), "--bf16-autocast off"),
        ({"BF16": "1"}, ("bf16", "BF16=1"), "--bf16-autocast on"),
        ({"BF16": "auto"}, ("auto", "BF16=auto"), None),
        ({"FP16": "1", "BF16": "auto"}, ("fp16", "FP16=1"), "--bf16-autocast off --fp16"),
        ({"PRECISION": "bf16", "BF16": "1"}, ("bf16", "PRECISION=bf16"), "--bf16-autocast on"),
    ],
)
def test_the_recipes_precision_its_older_spellings_and_their_arguments(environ, setting, passed):
    """recipe_setting() of PRECISION (FP16, BF16) and, for a set one, the fairseq-train arguments
    recipes/training.py passes on GPUs and CPUs alike (arguments() of it; auto: the devices decide, below).
    test_recipes.py runs three set ones through the recipe."""
    assert precision.recipe_setting(environ) == setting
    if passed is not None:
        assert precision.arguments(setting[0]) == passed.split()


@pytest.mark.parametrize(
    "gpus,chosen",
    [
        ([], None),
        ([((9, 0), "NVIDIA H200")], "bf16"),
        ([((8, 0), "NVIDIA A100-SXM4-40GB")], "bf16"),
        ([((7, 0), "Tesla V100-SXM2-16GB")], "fp16"),
        ([((6, 0), "Tesla P100-PCIE-16GB")], "fp32"),
        ([((9, 0), "NVIDIA H200"), ((7, 0), "Tesla V100-SXM2-16GB")], "fp16"),  # the smallest decides
    ],
)
def test_auto_on_gpus_by_the_smallest_compute_capability(gpus, chosen):
    if chosen is None:
        with pytest.raises(VaswaniConfigError, match="^PRECISION auto: no GPU visible to choose for; set PRECISION$"):
            precision.decide("auto", "cuda", gpus)
        return
    assert precision.decide("auto", "cuda", gpus) == precision.gpu_default(*min(gpus))
    assert precision.decide("auto", "cuda", gpus)[0] == chosen
    assert precision.decide("amp", "cuda", gpus) == ("amp", "PRECISION=amp")  # a setting is followed as said
    assert precision.decide("auto", "cpu", gpus)[0] == "auto"  # a CPU's: the task's, by its flags


@pytest.mark.parametrize(
    "common,task,trained",
    [
        ({"amp": True}, {"bf16_autocast": "off"}, "amp"),
        ({"fp16": True}, {"bf16_autocast": "off"}, "fp16"),
        ({"memory_efficient_fp16": True}, {}, "fp16"),
        ({}, {"bf16_autocast": "on"}, "bf16"),
        ({}, {"bf16_autocast": True}, "bf16"),
        ({}, {"bf16_autocast": "1", "tf32": True}, "bf16"),
        ({}, {"bf16_autocast": "off", "tf32": True}, "tf32"),
        ({}, {"bf16_autocast": "0"}, "fp32"),
        ({"cpu": True}, {"bf16_autocast": "auto"}, "auto"),
        ({"cpu": False}, {"bf16_autocast": "auto"}, "fp32"),  # auto on a GPU chose float32 before PRECISION
    ],
)
def test_the_precision_a_checkpoint_trained_in_is_the_one_its_arguments_give(common, task, trained):
    """trained_precision reads back what arguments() gave fairseq-train, parsed as fairseq stores it."""
    assert precision.trained_precision({"common": common, "task": task}) == trained
    if trained != "auto" and not common.get("memory_efficient_fp16") and task.get("bf16_autocast") in ("on", "off"):
        words = precision.arguments(trained)
        stored = {
            "common": {"amp": "--amp" in words, "fp16": "--fp16" in words, "cpu": False},
            "task": {"bf16_autocast": words[1], "tf32": "--tf32" in words},
        }
        assert precision.trained_precision(stored) == trained


@pytest.mark.parametrize(
    "spec,printed",
    [
        ("", None),
        ("9.0:NVIDIA H200:141", "bf16 NVIDIA H200, compute capability 9.0: bfloat16 tensor cores"),
        ("8.0:NVIDIA A100:40", "bf16 NVIDIA A100, compute capability 8.0: bfloat16 tensor cores"),
        ("7.0:Tesla V100:16", "fp16 Tesla V100, compute capability 7.0: float16 tensor cores, no bfloat16 ones"),
        (
            "6.0:Tesla P100:16",
            "fp32 Tesla P100, compute capability 6.0: no tensor cores for mixed precision, so float32",
        ),
    ],
)
def test_the_command_says_what_auto_chooses_on_the_visible_gpus(monkeypatch, capsys, spec, printed):
    """`python -m vaswani_plugin.precision` (on_these_gpus, which run 0 of a recipe asks in its process), on faked
    cards (tests/fake_gpus.py)."""
    from fake_gpus import fake

    fake(torch, spec, monkeypatch.setattr)
    if printed is None:
        with pytest.raises(SystemExit) as exit:  # sys.exit(line): the line on stderr, exit status 1
            precision.main([])
        assert exit.value.code == (
            "vaswani_plugin.precision: error: PRECISION auto: no GPU visible to choose for; set PRECISION"
        )
        return
    precision.main([])
    assert capsys.readouterr().out.strip() == printed


def test_the_precision_line_says_tf32_and_why_the_recipe_chose():
    assert (
        precision_line(
            False, "--bf16-autocast off", tf32=True, default="PRECISION unset: the precision its checkpoints trained in"
        )
        == "precision: float32 with TF32 products (--bf16-autocast off; PRECISION unset: the precision its checkpoints "
        "trained in)"
    )
    assert precision_line(True, "--bf16-autocast on", tf32=True) == "precision: bfloat16 autocast (--bf16-autocast on)"

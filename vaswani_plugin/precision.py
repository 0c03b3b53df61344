"""The one decision on a run's precision: the recipes' PRECISION (auto, fp32, tf32, fp16, amp, bf16) and the task's
--bf16-autocast (auto|on|off; a bare --bf16-autocast means on; 1 and 0 mean on and off), and what gpu_batch sizes a
batch for and the training-cost line counts a peak of.

auto is mixed precision wherever it pays (docs/recipes.md, "Precision"):
- on a GPU by its compute capability (the smallest of the node's decides): 8.0 or more, bfloat16 autocast (the
  task's; weights, loss and Adam in float32); 7.x, fairseq's --fp16 (float16 tensor cores, no bfloat16 ones); below,
  float32 (no tensor cores);
- on a CPU, bfloat16 autocast where it multiplies bfloat16 natively (AVX512-BF16 or AMX, read from Linux's CPU flags),
  where the products run faster (docs/results.md); float32 on other CPUs (bfloat16 emulated, slower), where the flags
  cannot be read (not Linux), and beside fairseq's own --fp16, --amp or --bf16. on beside one of those is an error.

    python -m vaswani_plugin.precision   # what auto chooses on this machine's GPUs: `PRECISION why`
"""

import sys
from pathlib import Path
from typing import FrozenSet, List, Mapping, Optional, Tuple

from vaswani_plugin.errors import VaswaniConfigError

SETTINGS = {"auto": "auto", "on": "on", "1": "on", "true": "on", "off": "off", "0": "off", "false": "off"}
# true and false: the option was a flag before, and a checkpoint's config may still hold True or False.
NATIVE_BFLOAT16_FLAGS = ("avx512_bf16", "amx_bf16")  # Linux's names for AVX512-BF16 and AMX's bfloat16 tiles
CONFLICT = "--bf16-autocast is a precision of its own: drop --fp16, --amp and --bf16"
# The recipes' PRECISION: fairseq-train's arguments for each (the task's --bf16-autocast always given). auto on a CPU
# is the task's own (--bf16-autocast auto, by the CPU's flags).
PRECISIONS = {
    "fp32": ["--bf16-autocast", "off"],
    "tf32": ["--bf16-autocast", "off", "--tf32"],
    "fp16": ["--bf16-autocast", "off", "--fp16"],
    "amp": ["--bf16-autocast", "off", "--amp"],
    "bf16": ["--bf16-autocast", "on"],
}
GPU_ONLY = ("tf32", "fp16", "amp")  # fairseq's half precisions need CUDA; TF32 is a GPU's
LEGACY_BF16 = {"1": "bf16", "0": "fp32", "auto": "auto"}  # BF16=0 is float32 everywhere, as before PRECISION
BFLOAT16_CAPABILITY, FLOAT16_CAPABILITY = (8, 0), (7, 0)  # Ampere's bfloat16 tensor cores; Volta's float16 ones


def bf16_autocast_setting(value) -> str:
    """auto, on or off, from any spelling the option accepts; a one-line VaswaniConfigError otherwise."""
    setting = SETTINGS.get(str(value).strip().lower())
    if setting is None:
        raise VaswaniConfigError(f"--bf16-autocast {value}: use auto, on (1) or off (0)")
    return setting


def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> Optional[FrozenSet[str]]:
    """The CPU's feature flags as Linux lists them in /proc/cpuinfo; None where they cannot be read."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        return None
    return frozenset(
        flag for line in text.splitlines() if line.startswith("flags") for flag in line.partition(":")[2].split()
    )


def bf16_autocast_enabled(
    setting,
    device,
    fairseq_precision: Optional[str] = None,
    flags: Optional[FrozenSet[str]] = None,
    gpu: Optional[Tuple[Tuple[int, int], str]] = None,
) -> Tuple[bool, str]:
    """(whether to train under bfloat16 autocast, why: "--bf16-autocast SETTING[: reason]").

    setting: the option's value (auto, on, off; 1, 0; True, False). device: where the model trains, a
    torch.device or its type ("cpu", "cuda", ...). fairseq_precision: fairseq's own mixed precision in use
    ("--fp16", "--amp", "--bf16", ...), None for float32. flags: the CPU's flags, read from /proc/cpuinfo when
    None; gpu: the GPU's (compute capability, name), torch's for `device` when None (tests fake both). Raises
    VaswaniConfigError for a bad setting and for on beside fairseq_precision.
    """
    setting = bf16_autocast_setting(setting)
    if setting == "off":
        return False, "--bf16-autocast off"
    if setting == "on":
        if fairseq_precision:
            raise VaswaniConfigError(CONFLICT)
        return True, "--bf16-autocast on"
    if fairseq_precision:
        return False, f"--bf16-autocast auto: fairseq's {fairseq_precision} was chosen"
    device_type = getattr(device, "type", str(device).split(":")[0])
    if device_type == "cuda":
        if gpu is None:
            import torch

            gpu = (tuple(torch.cuda.get_device_capability(device)), torch.cuda.get_device_name(device))
        chosen, why = gpu_default(*gpu)
        also = " (its mixed precision is fairseq's --fp16, which PRECISION=auto passes)" if chosen == "fp16" else ""
        return chosen == "bf16", f"--bf16-autocast auto: {why}{also}"
    if device_type != "cpu":
        return False, f"--bf16-autocast auto: on for CPUs and GPUs only, and this is {device_type}"
    if flags is None:
        flags = cpu_flags()
    if flags is None:
        return False, f"--bf16-autocast auto: no CPU flags to read on {sys.platform}"
    native = [flag for flag in NATIVE_BFLOAT16_FLAGS if flag in flags]
    if native:
        return True, f"--bf16-autocast auto: this CPU has {' and '.join(native)}"
    return False, "--bf16-autocast auto: no native bfloat16 on this CPU"


def precision_line(
    enabled: bool, reason: str, fairseq_precision: Optional[str] = None, tf32: bool = False, default: str = ""
) -> str:
    """The line the task logs once at the start of training, e.g.
    `precision: bfloat16 autocast (--bf16-autocast auto: this CPU has avx512_bf16)`; `default`: why the recipes
    chose it (their PRECISION unset), appended as `; PRECISION unset: ...`."""
    what = "bfloat16 autocast" if enabled else f"fairseq's {fairseq_precision}" if fairseq_precision else "float32"
    what += " with TF32 products" if tf32 and not enabled and not fairseq_precision else ""
    return f"precision: {what} ({reason}{'; ' + default if default else ''})"


def recipe_setting(environ: Mapping[str, str]) -> Tuple[str, str]:
    """(auto or one of PRECISIONS, the variables that said so) from the recipes' PRECISION and its older spellings
    FP16=1, BF16=1|0|auto; a one-line VaswaniConfigError where they are bad or disagree."""
    precision, fp16, bf16 = (environ.get(name, "").strip().lower() for name in ("PRECISION", "FP16", "BF16"))
    if precision and precision != "auto" and precision not in PRECISIONS:
        raise VaswaniConfigError(f"PRECISION={precision}: use auto, {', '.join(PRECISIONS)}")
    if fp16 not in ("", "0", "1"):
        raise VaswaniConfigError(f"FP16={fp16}: use 1 (PRECISION=fp16) or 0")
    if bf16 and bf16 not in LEGACY_BF16:
        raise VaswaniConfigError(f"BF16={bf16}: use 1 (PRECISION=bf16), 0 (PRECISION=fp32) or auto")
    legacy = [f"{name}={value}" for name, value in (("FP16", fp16), ("BF16", bf16)) if value and value != "0"]
    if fp16 == "1" and bf16 == "1":
        raise VaswaniConfigError("FP16=1 and BF16=1 are two precisions: set PRECISION=fp16 or PRECISION=bf16")
    if fp16 == "1":
        older, said = "fp16", "FP16=1"
    elif bf16:
        older, said = LEGACY_BF16[bf16], f"BF16={bf16}"
    else:
        older, said = "", ""
    if precision and older and older != precision:
        raise VaswaniConfigError(f"PRECISION={precision} and {' '.join(legacy) or said} disagree: set PRECISION alone")
    if precision:
        return precision, f"PRECISION={precision}"
    return (older, said) if older else ("auto", "PRECISION unset")


def gpu_default(capability: Tuple[int, int], name: str) -> Tuple[str, str]:
    """auto on a GPU of compute `capability` (major, minor): (one of PRECISIONS, why)."""
    card = f"{name}, compute capability {capability[0]}.{capability[1]}"
    if tuple(capability) >= BFLOAT16_CAPABILITY:
        return "bf16", f"{card}: bfloat16 tensor cores"
    if tuple(capability) >= FLOAT16_CAPABILITY:
        return "fp16", f"{card}: float16 tensor cores, no bfloat16 ones"
    return "fp32", f"{card}: no tensor cores for mixed precision, so float32"


def check_device(setting: str, device_type: str) -> None:
    """A one-line VaswaniConfigError for a recipes' `setting` that `device_type` ("cpu", "cuda") cannot train in."""
    if device_type == "cpu" and setting in GPU_ONLY:
        raise VaswaniConfigError(
            f"PRECISION={setting} is for GPUs (fairseq's {setting} needs CUDA): on a CPU use auto, fp32 or bf16"
        )


def decide(setting: str, device_type: str, gpus: Optional[List[Tuple[Tuple[int, int], str]]] = None) -> Tuple[str, str]:
    """(one of PRECISIONS, or auto on a CPU: the task's choice by the CPU's flags; why) for the recipes' `setting`
    on `device_type` ("cpu", "cuda"); gpus: each visible GPU's (capability, name), the smallest capability deciding."""
    check_device(setting, device_type)
    if setting != "auto":
        return setting, f"PRECISION={setting}"
    if device_type == "cpu":
        return "auto", "auto on a CPU: the task's --bf16-autocast auto, by the CPU's flags"
    if not gpus:
        raise VaswaniConfigError("PRECISION auto: no GPU visible to choose for; set PRECISION")
    return gpu_default(*min(gpus))


def arguments(precision: str) -> List[str]:
    """fairseq-train's arguments for one of PRECISIONS, or auto (the task decides, on a CPU)."""
    return ["--bf16-autocast", "auto"] if precision == "auto" else list(PRECISIONS[precision])


def trained_precision(cfg: dict) -> str:
    """The PRECISION a checkpoint's fairseq configuration trained in (auto: the task decided it, on a CPU)."""
    common, task = cfg.get("common") or {}, cfg.get("task") or {}
    if common.get("amp"):
        return "amp"
    if common.get("fp16") or common.get("memory_efficient_fp16"):
        return "fp16"
    setting = bf16_autocast_setting(task.get("bf16_autocast", "off"))
    if setting == "on":
        return "bf16"
    if setting == "auto" and common.get("cpu"):
        return "auto"
    return "tf32" if task.get("tf32") else "fp32"  # auto on a GPU was float32 before it chose by the card


def visible_gpus() -> List[Tuple[Tuple[int, int], str]]:
    """Each visible GPU's (compute capability, name), by torch."""
    import torch

    if not torch.cuda.is_available():
        return []
    return [
        (tuple(torch.cuda.get_device_capability(index)), torch.cuda.get_device_name(index))
        for index in range(torch.cuda.device_count())
    ]


def on_these_gpus() -> str:
    """What auto chooses on this machine's GPUs, `PRECISION why`: the recipes' run 0 decides by it, in its process."""
    return " ".join(decide("auto", "cuda", visible_gpus()))


def main(argv=None) -> None:
    import argparse

    from vaswani_plugin.cli import run_command

    parser = argparse.ArgumentParser(prog="vaswani_plugin.precision", description=__doc__.split("\n")[0])
    run_command(parser, lambda args: print(on_these_gpus()), argv)


if __name__ == "__main__":
    main()

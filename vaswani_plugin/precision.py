"""The one decision on bfloat16 autocast, made for the task's --bf16-autocast (and benchmarks/speed.py's).

--bf16-autocast auto|on|off (a bare --bf16-autocast means on; 1 and 0, the recipes' BF16 values, mean on and
off). auto is on only where it pays: on a CPU that multiplies bfloat16 natively (AVX512-BF16 or AMX, read from
Linux's CPU flags), where the products run faster (docs/results.md); off on GPUs (which have fairseq's --fp16 and
--amp), on other CPUs (where bfloat16 is emulated, and slower than float32), where the flags cannot be read (not
Linux), and beside fairseq's own --fp16, --amp or --bf16. on beside one of those is an error.
"""

import sys
from pathlib import Path
from typing import FrozenSet, Optional, Tuple

from vaswani_plugin.errors import VaswaniConfigError

SETTINGS = {"auto": "auto", "on": "on", "1": "on", "true": "on", "off": "off", "0": "off", "false": "off"}
# true and false: the option was a flag before, and a checkpoint's config may still hold True or False.
NATIVE_BFLOAT16_FLAGS = ("avx512_bf16", "amx_bf16")  # Linux's names for AVX512-BF16 and AMX's bfloat16 tiles
CONFLICT = "--bf16-autocast is a precision of its own: drop --fp16, --amp and --bf16"


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
    setting, device, fairseq_precision: Optional[str] = None, flags: Optional[FrozenSet[str]] = None
) -> Tuple[bool, str]:
    """(whether to train under bfloat16 autocast, why: "--bf16-autocast SETTING[: reason]").

    setting: the option's value (auto, on, off; 1, 0; True, False). device: where the model trains, a
    torch.device or its type ("cpu", "cuda", ...). fairseq_precision: fairseq's own mixed precision in use
    ("--fp16", "--amp", "--bf16", ...), None for float32. flags: the CPU's flags, read from /proc/cpuinfo when
    None (tests fake them). Raises VaswaniConfigError for a bad setting and for on beside fairseq_precision.
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
    if device_type != "cpu":
        return False, f"--bf16-autocast auto: on for CPUs only, and this is {device_type}"
    if flags is None:
        flags = cpu_flags()
    if flags is None:
        return False, f"--bf16-autocast auto: no CPU flags to read on {sys.platform}"
    native = [flag for flag in NATIVE_BFLOAT16_FLAGS if flag in flags]
    if native:
        return True, f"--bf16-autocast auto: this CPU has {' and '.join(native)}"
    return False, "--bf16-autocast auto: no native bfloat16 on this CPU"


def precision_line(enabled: bool, reason: str, fairseq_precision: Optional[str] = None) -> str:
    """The line the task logs once at the start of training, e.g.
    `precision: bfloat16 autocast (--bf16-autocast auto: this CPU has avx512_bf16)`."""
    what = "bfloat16 autocast" if enabled else f"fairseq's {fairseq_precision}" if fairseq_precision else "float32"
    return f"precision: {what} ({reason})"

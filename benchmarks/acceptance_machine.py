"""The GPU acceptance's machine table: the GPU and its peak, driver, torch, CPU, Python, fairseq and the plugin's
commit; and, where no GPU is visible, what the machine shows of CUDA."""

import importlib.metadata
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from common import PLUGIN, cpu_model, git_describe


def machine(device, kit):
    """Rows of the report's machine table."""
    import torch

    rows = {}
    if device == "cuda":
        from vaswani_plugin.tools.training_cost import peak_for  # imports fairseq: only here

        name = torch.cuda.get_device_name(0)
        peak = peak_for(name, "amp")
        rows["GPU"] = name + (
            f" (dense fp16/bf16 peak {peak:g} TFLOP/s, vaswani_plugin.tools.training_cost)"
            if peak
            else " (peak FLOP/s unknown to vaswani_plugin.tools.training_cost: no MFU)"
        )
    else:
        rows["GPU"] = "none: the CPU stand-in (--device cpu --tiny)"
    rows["driver / CUDA"] = _nvidia_smi(["nvidia-smi"], r"Driver Version: *\S+.*?CUDA Version: *\S+")
    rows["nvidia-smi"] = _nvidia_smi(
        ["nvidia-smi", "--query-gpu=name,driver_version,memory.total,power.limit", "--format=csv,noheader"], r".+"
    )
    rows["torch"] = torch.__version__ + (
        f", CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}" if torch.version.cuda else ""
    )
    rows["CPU"] = f"{cpu_model()}, {os.cpu_count()} cores"
    rows["Python"] = f"{sys.version.split()[0]} ({sys.executable})"
    rows["fairseq"] = _fairseq()
    rows["vaswani_plugin"] = f"--user-dir {PLUGIN}, {git_describe()}"
    if kit:
        manifest = json.loads((kit / "kit.json").read_text())
        rows["GPU kit"] = (
            f"{kit}: built {manifest['built']} from {manifest['commit']} for Python "
            f"{manifest['python']}; " + ", ".join(f"{name} {version}" for name, version in manifest["packages"].items())
        )
    return rows


def cuda_rows():
    """What this machine shows of CUDA, for the report of a run that found no GPU."""
    import glob

    import torch

    rows = {
        "torch": f"{torch.__version__} ({'CUDA ' + torch.version.cuda if torch.version.cuda else 'a CPU build'})",
        "torch.cuda.is_available()": str(torch.cuda.is_available()),
        "torch.cuda.device_count()": str(torch.cuda.device_count()),
    }
    try:
        torch.cuda.init()
        rows["torch.cuda.init()"] = "no error"
    except Exception as error:  # the driver's or the build's own words
        rows["torch.cuda.init()"] = " ".join(f"{type(error).__name__}: {error}".split())
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    rows["CUDA_VISIBLE_DEVICES"] = (
        "not set"
        if visible is None
        else f"{visible!r}" + (" (empty: CUDA is shown no GPU)" if not visible.strip() else "")
    )
    rows["/dev/nvidia*"] = ", ".join(sorted(glob.glob("/dev/nvidia*"))) or "none"
    rows["nvidia-smi -L"] = _nvidia_smi(["nvidia-smi", "-L"], r".+")
    rows["Python"] = f"{sys.version.split()[0]} ({sys.executable})"
    return rows


def _fairseq():
    """fairseq's distribution, version and folder, as this Python imports it."""
    spec = importlib.util.find_spec("fairseq")
    for dist in ("ve-fairseq", "fairseq"):
        try:
            return f"{dist} {importlib.metadata.version(dist)}, {Path(spec.origin).parent}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return f"version unknown, {Path(spec.origin).parent}"


def _nvidia_smi(command, pattern):
    try:
        output = subprocess.run(command, capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "nvidia-smi not found"
    found = re.search(pattern, output)
    return " ".join(found[0].split()) if found else "not in nvidia-smi's output"

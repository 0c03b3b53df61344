"""A stand-in for the recipes' PYTHON on a machine without GPUs: `python tests/fake_gpus.py -m MODULE ARGS...` runs
MODULE with torch seeing the GPUs of FAKE_GPUS, e.g. "8.0:NVIDIA A100-SXM4-40GB:40,7.0:Tesla V100-SXM2-16GB:16"
(compute capability, name and GiB of each; their properties only: nothing runs on them)."""

import importlib.util
import os
import runpy
import sys
import types


def fake(torch, spec: str, setattr=setattr) -> None:
    """torch.cuda's device queries answer for the GPUs of `spec` (FAKE_GPUS's form); `setattr`: a test's
    monkeypatch.setattr, which undoes it after the test."""
    gpus = []
    for item in filter(None, spec.split(",")):
        capability, name, gib = item.split(":")
        major, minor = map(int, capability.split("."))
        gpus.append(types.SimpleNamespace(total_memory=int(float(gib) * 2**30), name=name, major=major, minor=minor))

    def properties(device=None):
        index = getattr(device, "index", device)
        index = int(str(index).rpartition(":")[2]) if isinstance(index, str) else index
        return gpus[index or 0]

    setattr(torch.cuda, "is_available", lambda: bool(gpus))
    setattr(torch.cuda, "device_count", lambda: len(gpus))
    setattr(torch.cuda, "get_device_properties", properties)
    setattr(
        torch.cuda, "get_device_capability", lambda device=None: (properties(device).major, properties(device).minor)
    )
    setattr(torch.cuda, "get_device_name", lambda device=None: properties(device).name)


class FakeWhenImported:
    """Fakes torch.cuda as torch is first imported, so that a module that never imports torch never pays for it."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        execute = spec.loader.exec_module

        def exec_module(module):
            execute(module)
            fake(module, os.environ.get("FAKE_GPUS", ""))

        spec.loader.exec_module = exec_module
        return spec


if __name__ == "__main__":
    if sys.argv[1:2] != ["-m"]:
        sys.exit(f"fake_gpus.py: give -m MODULE, not {sys.argv[1:]}")
    sys.meta_path.insert(0, FakeWhenImported())
    sys.argv = sys.argv[2:]
    runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)

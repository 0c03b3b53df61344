"""The suite's Python subprocesses (tests/conftest.py puts this folder first on PYTHONPATH): scikit-learn and
scipy.stats, which fairseq imports as it starts (its sentence-prediction criterion and audio-classification task)
and which no test uses, are imported at their first use instead: about 1.3 of the 4-5 CPU seconds a fairseq
process takes to start (docs/results.md, "Test suite time"). Until then each is a stand-in module whose attributes
import the real module when they are called or read. With VASWANI_SUITE_PROCESSES=FILE each process also appends
what it cost as it exits (account)."""

import importlib
import importlib.abc
import importlib.machinery
import os
import sys
import types

DEFERRED = ("sklearn", "scipy.stats")


def deferred(name: str) -> bool:
    return any(name == top or name.startswith(top + ".") for top in DEFERRED)


class Deferred(types.ModuleType):
    """A module not imported yet: each attribute a stand-in for the real module's."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return Attribute(self.__name__, name)


class Attribute:
    """MODULE.NAME, imported when called or read further (a submodule's name too)."""

    def __init__(self, module: str, name: str):
        self._where = module, name

    def _real(self):
        module, name = self._where
        imported = real(module)
        if not hasattr(imported, name):  # a submodule not imported by its package
            importlib.import_module(f"{module}.{name}")
        return getattr(imported, name)

    def __call__(self, *args, **kwargs):
        return self._real()(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._real(), name)


class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Gives DEFERRED modules as Deferred stand-ins until the first real use; from then on, nothing."""

    active = True

    def find_spec(self, name, path=None, target=None):
        if self.active and deferred(name):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = Deferred(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


FINDER = Finder()


def real(name: str):
    """The real module `name`: every stand-in dropped and the finder off, once."""
    if FINDER.active:
        FINDER.active = False
        for key in [key for key, module in sys.modules.items() if isinstance(module, Deferred)]:
            del sys.modules[key]
    return importlib.import_module(name)


sys.meta_path.insert(0, FINDER)


def account(path: str) -> None:
    """VASWANI_SUITE_PROCESSES=FILE: each process appends, as it exits, its CPU seconds (user, system), its wall
    seconds, whether it imported fairseq and its command line: where the suite's subprocess time goes."""
    import atexit
    import resource
    import time

    started = time.monotonic()

    def write():
        usage = resource.getrusage(resource.RUSAGE_SELF)
        command = " ".join(sys.orig_argv)[:300].replace("\t", " ").replace("\n", " ")
        line = f"{usage.ru_utime:.2f}\t{usage.ru_stime:.2f}\t{time.monotonic() - started:.2f}\t"
        line += f"{int('fairseq' in sys.modules)}\t{command}\n"
        with open(path, "a", encoding="utf-8") as log:
            log.write(line)

    atexit.register(write)


if os.environ.get("VASWANI_SUITE_PROCESSES"):
    account(os.environ["VASWANI_SUITE_PROCESSES"])

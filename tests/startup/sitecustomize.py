"""The suite's Python subprocesses (tests/conftest.py puts this folder first on PYTHONPATH) import at their first use
what they import as they start and no test uses: scikit-learn and scipy.stats, which fairseq imports (its
sentence-prediction criterion and audio-classification task), about 1.3 of the 4-5 CPU seconds a fairseq process
takes to start; and torch._dynamo, which torch's optimizers import to wrap their methods and step (1.1-1.4 CPU-s in
every training process). Until then each is a stand-in module: scikit-learn's and scipy's attributes import the real
module when they are called or read; torch._dynamo's stand-in does what eager code asks of it (graph_break: nothing;
disable: the function itself, since nothing compiles) and any other attribute imports the real one (torch.compile).
With VASWANI_SUITE_PROCESSES=FILE each process also appends what it cost as it exits (account)."""

import importlib
import importlib.abc
import importlib.machinery
import os
import sys
import types

# Each group is made real at once, at its first use: scikit-learn imports scipy.stats as it starts.
GROUPS = {"sklearn": "scipy", "scipy.stats": "scipy", "torch._dynamo": "dynamo"}  # and their submodules
DYNAMO = "torch._dynamo"


def group(name: str):
    """The group of a module deferred here, or None."""
    return next((group for top, group in GROUPS.items() if name == top or name.startswith(top + ".")), None)


class Deferred(types.ModuleType):
    """A module not imported yet: each attribute a stand-in for the real module's."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return Attribute(self.__name__, name)


class Dynamo(Deferred):
    """torch._dynamo until a use that compiles: what torch.optim asks of it outside torch.compile, as eager code."""

    @staticmethod
    def graph_break(msg=""):  # outside a compiled region, dynamo's own does nothing
        pass

    @staticmethod
    def disable(fn=None, recursive=True, *, reason=None, wrapping=True):  # no region compiles: fn runs as it is
        return fn if fn is not None else (lambda function: function)

    def __getattr__(self, name):
        if name == "__path__" and self.__dict__.get("made"):  # a submodule imported: the real package's
            return real(self.__name__).__path__
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(real(self.__name__), name)


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
    """Gives the GROUPS' modules as stand-ins until their group's first real use; from then on, nothing."""

    made_real = set()  # groups

    def find_spec(self, name, path=None, target=None):
        deferred = group(name)
        if deferred is None or deferred in self.made_real:
            return None
        if deferred == "dynamo":  # the package only, as a module (Python would read a package's __path__ at once)
            return importlib.machinery.ModuleSpec(name, self) if name == DYNAMO else None
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec):
        if spec.name == DYNAMO:
            return Dynamo(spec.name)
        module = Deferred(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        module.made = True  # Python has read what it reads of a new module (its __path__ among them)


FINDER = Finder()


def real(name: str):
    """The real module `name`: its group's stand-ins dropped and the finder off for the group, once."""
    deferred = group(name)
    if deferred not in FINDER.made_real:
        FINDER.made_real.add(deferred)
        for key in [key for key, module in sys.modules.items() if isinstance(module, Deferred)]:
            if group(key) == deferred:
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

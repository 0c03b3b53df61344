"""tests/startup/sitecustomize.py, in a subprocess as the suite's commands start: a training step leaves
torch._dynamo a stand-in; a submodule's import brings the real package and torch.compile works; scipy.stats,
imported before, stays a stand-in until it is read."""

import subprocess
import sys

PROGRAM = """
import sys, torch
model = torch.nn.Linear(3, 2)
optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)  # add_param_group: torch._disable_dynamo's wrapper
before = model.weight.detach().clone()
model(torch.ones(1, 3)).sum().backward()
optimizer.step()  # graph_break before and after the update
import scipy.stats
print(type(sys.modules["torch._dynamo"]).__name__, bool((model.weight != before).all()))
import torch._dynamo.config as config
print(type(torch._dynamo).__name__, config is torch._dynamo.config is sys.modules["torch._dynamo.config"])
f = torch.compile(lambda x: torch.sin(x) * 2, backend="eager")
x = torch.arange(3.0)
print(torch.equal(f(x), torch.sin(x) * 2), torch._dynamo.utils.counters["stats"]["unique_graphs"])
print(type(sys.modules["scipy.stats"]).__name__, float(scipy.stats.norm.cdf(0.0)))  # read: the real module
"""


def test_dynamo_is_a_stand_in_through_a_step_and_real_for_a_compile_scipy_deferred_apart():
    done = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == ["Dynamo True", "module True", "True 1", "Deferred 0.5"]

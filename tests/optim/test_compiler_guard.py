"""The rules call torch.optim's guarded methods without loading the compiler where none runs,
and torch's own guards once it is loaded; the numbers are torch's either way."""

import json
import subprocess
import sys

import pytest
import torch

from gaugelab.optim import _compiler_guard, make_optimizer
from gaugelab.optim._base import ZooMixin
from gaugelab.optim._compiler_guard import torch_method

# the guard's view of "not loaded": removing torch._dynamo from sys.modules instead would
# make the next import of it re-run half a package
_NOT_LOADED = "gaugelab-test: no such module"

_FRESH = """
import json, sys
import torch
from gaugelab.determinism import deterministic
from gaugelab.optim import make_optimizer

out = {}
g = torch.Generator().manual_seed(0)
for name in ("gd", "adam", "adamw", "muon"):
    w = torch.randn(3, 5, 4, generator=g, dtype=torch.float64, requires_grad=True)
    opt = make_optimizer(name, [w], lr=0.1, member_dims=1)
    with deterministic():
        for _ in range(3):
            opt.zero_grad()
            (w**3).sum().backward()
            opt.step()
    state = opt.state_dict()
    opt.load_state_dict(state)
    out[name] = w.detach().flatten().tolist()
print(json.dumps({"loaded": [m for m in ("torch._dynamo", "torch._inductor", "sympy")
                             if m in sys.modules], "w": out}))
"""


def test_building_stepping_and_saving_a_rule_load_no_compiler_and_match_torch():
    done = subprocess.run(
        [sys.executable, "-c", _FRESH], capture_output=True, text=True, check=True, timeout=120
    )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["loaded"] == []
    # the same steps through torch's guarded methods (this process may have loaded the
    # compiler; the numbers must not depend on it)
    g = torch.Generator().manual_seed(0)
    for name in ("gd", "adam", "adamw", "muon"):
        w = torch.randn(3, 5, 4, generator=g, dtype=torch.float64, requires_grad=True)
        opt = make_optimizer(name, [w], lr=0.1, member_dims=1)
        for _ in range(3):
            opt.zero_grad()
            (w**3).sum().backward()
            opt.step()
        assert w.detach().flatten().tolist() == result["w"][name], name


def test_torch_method_is_the_guard_once_the_compiler_is_loaded(monkeypatch):
    w = torch.zeros(2, 2, requires_grad=True)
    opt = make_optimizer("adam", [w], lr=0.1)
    guarded = torch.optim.Optimizer.zero_grad
    monkeypatch.setattr(_compiler_guard, "_COMPILER", "sys")  # a module always loaded
    assert torch_method(super(ZooMixin, opt).zero_grad).__func__ is guarded
    monkeypatch.setattr(_compiler_guard, "_COMPILER", _NOT_LOADED)
    unguarded = torch_method(super(ZooMixin, opt).zero_grad)
    assert unguarded.__func__ is guarded.__wrapped__ and unguarded.__self__ is opt


def test_a_method_that_wraps_nothing_is_returned_as_is(monkeypatch):
    monkeypatch.setattr(_compiler_guard, "_COMPILER", _NOT_LOADED)

    class Plain:
        def f(self):
            return 1

    bound = Plain().f
    assert torch_method(bound) is bound


@pytest.mark.parametrize("name", ["gd", "adam"])
def test_the_unguarded_step_runs_outside_autograd_as_torch_s_wrapper_sets_it(name, monkeypatch):
    # with grad enabled, the in-place update of a leaf that requires grad would raise
    monkeypatch.setattr(_compiler_guard, "_COMPILER", _NOT_LOADED)
    w = torch.ones(2, 2, requires_grad=True)
    opt = make_optimizer(name, [w], lr=0.1)
    (w**2).sum().backward()
    with torch.enable_grad():
        opt.step()
    assert torch.all(w < 1) and w.requires_grad

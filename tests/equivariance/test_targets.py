"""gaugelab.equivariance.targets: a zoo name, a class or ``module:Class`` becomes an optimizer."""

import sys

import pytest
import torch

from gaugelab.equivariance import check_equivariance, resolve_optimizer
from gaugelab.optim import HeavyBall

# Every bad target fails before anything runs, from the resolver and from the check alike.
ENTRIES = [
    pytest.param(lambda target: resolve_optimizer(target, {}), id="resolve_optimizer"),
    pytest.param(lambda target: check_equivariance(target), id="check_equivariance"),
]


def test_module_in_the_current_directory_is_resolved_and_sys_path_restored(tmp_path, monkeypatch):
    (tmp_path / "gl_target_opts.py").write_text(
        "from torch.optim import SGD\n\nclass MySGD(SGD):\n    pass\n"
    )
    monkeypatch.chdir(tmp_path)
    before = list(sys.path)
    name, factory = resolve_optimizer("gl_target_opts:MySGD", {"lr": 0.5})
    opt = factory([torch.zeros(2, 2, requires_grad=True)])
    assert name == "gl_target_opts:MySGD" and type(opt).__name__ == "MySGD"
    assert opt.param_groups[0]["lr"] == 0.5
    assert sys.path == before


def test_a_zoo_class_is_named_by_its_zoo_name():
    name, factory = resolve_optimizer(HeavyBall, {})
    assert name == "heavy-ball"
    assert isinstance(factory([torch.zeros(2, 2, requires_grad=True)]), HeavyBall)


@pytest.mark.parametrize("entry", ENTRIES)
def test_a_module_raising_on_import_gives_a_value_error_naming_target_and_cause(
    entry, tmp_path, monkeypatch
):
    (tmp_path / "gl_broken_opts.py").write_text("raise RuntimeError('no GPU here')\n")
    monkeypatch.chdir(tmp_path)
    before = list(sys.path)
    with pytest.raises(ValueError, match=r"'gl_broken_opts:X'.*RuntimeError: no GPU here"):
        entry("gl_broken_opts:X")
    assert sys.path == before


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize(
    ("target", "what"),
    [("json:dumps", "a function"), ("json:JSONEncoder", "json.encoder.JSONEncoder")],
)
def test_a_target_that_is_not_an_optimizer_gives_a_type_error_naming_it(entry, target, what):
    with pytest.raises(TypeError, match=rf"{target!r} is .*{what}.*not a torch\.optim\.Optimizer"):
        entry(target)


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize(
    ("optimizer", "match"),
    [
        ("no.such.module:X", "no.such.module"),
        ("torch.optim:NotThere", "NotThere"),
        ("adamm", "known rules: .*adam, adam-p"),
    ],
    ids=["module", "attribute", "rule"],
)
def test_a_bad_target_is_rejected_with_value_error(entry, optimizer, match):
    with pytest.raises(ValueError, match=match):
        entry(optimizer)


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("optimizer", [dict, "collections:OrderedDict"])
def test_a_non_optimizer_class_is_rejected_with_type_error(entry, optimizer):
    with pytest.raises(TypeError, match=r"torch\.optim\.Optimizer"):
        entry(optimizer)


def test_an_optimizer_instance_is_rejected_and_the_class_asked_for():
    sgd = torch.optim.SGD([torch.zeros(2, 2, requires_grad=True)])
    with pytest.raises(TypeError, match=r"an instance of SGD \(give the class, not an instance\)"):
        resolve_optimizer(sgd, {})


def test_a_hyperparameter_the_class_does_not_take_is_rejected_naming_what_it_takes():
    with pytest.raises(ValueError, match=r"unknown hyperparameter\(s\) bogus for .*allowed: lr"):
        resolve_optimizer(torch.optim.SGD, {"bogus": 1})

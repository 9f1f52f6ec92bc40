"""gaugelab.equivariance.check: the twin-triplet certificate and its verdicts."""

import itertools
import json

import pytest
import torch

from gaugelab.equivariance import (
    BREAKS,
    EQUIVARIANT,
    NONDETERMINISTIC,
    check_equivariance,
)
from gaugelab.optim import CLAIMS, OPTIMIZERS, HeavyBall

FAST = {"steps": 5, "draws": 2}
CASES = [
    pytest.param(rule, group, id=f"{rule}-{group}")
    for rule in sorted(CLAIMS)
    for group in sorted(CLAIMS[rule])
]

_noise_calls = itertools.count()


class NoisySGD(torch.optim.Optimizer):
    """SGD plus noise from a generator seeded by a global call counter: no two runs agree."""

    def __init__(self, params, lr=1e-2):
        super().__init__(params, {"lr": lr})

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        gen = torch.Generator().manual_seed(next(_noise_calls))
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    noise = 1e-3 * torch.randn(p.shape, generator=gen, dtype=p.dtype)
                    p.add_(p.grad + noise, alpha=-group["lr"])
        return loss


@pytest.mark.parametrize(("rule", "group"), CASES)
def test_check_equivariance_returns_the_claimed_verdict(rule, group):
    report = check_equivariance(rule, group=group, **FAST)
    assert report.verdict == CLAIMS[rule][group].property, report.explanation
    assert report.claimed == CLAIMS[rule][group].property
    assert report.moved > 1e-3


def test_adam_p_at_p_zero_is_certified_equivariant():
    report = check_equivariance("adam-p", p=0.0, **FAST)
    assert report.verdict == EQUIVARIANT and report.claimed == EQUIVARIANT


@pytest.mark.parametrize("p", [0.25, 1.0])
def test_adam_p_away_from_p_zero_breaks(p):
    assert check_equivariance("adam-p", p=p, **FAST).verdict == BREAKS


@pytest.mark.parametrize("method", ["newton_schulz", "svd"])
def test_muon_is_certified_equivariant_with_either_msign_method(method):
    assert check_equivariance("muon", msign=method, **FAST).verdict == EQUIVARIANT


def test_torch_muon_is_not_certified_and_the_report_blames_bfloat16():
    report = check_equivariance("torch.optim:Muon", steps=3, draws=1)
    assert report.verdict != EQUIVARIANT
    assert any("bfloat16" in note for note in report.notes)


@pytest.mark.parametrize("rule", sorted(OPTIMIZERS))
def test_identity_twin_distances_are_exactly_zero(rule):
    report = check_equivariance(rule, steps=3, draws=1)
    assert all(d == 0.0 for row in report.distances["identity"] for d in row)


def test_report_to_json_round_trips_through_json_loads():
    report = check_equivariance("adam", **FAST)
    assert json.loads(report.to_json()) == report.to_dict()
    assert report.worst("gauge") == [
        max(row[t] for row in report.distances["gauge"]) for t in range(report.steps)
    ]


def test_nondeterministic_optimizer_gets_the_nondeterministic_verdict():
    report = check_equivariance(NoisySGD, **FAST)
    assert report.verdict == NONDETERMINISTIC
    assert max(max(row) for row in report.distances["identity"]) > 0


def test_a_class_object_is_accepted_and_named_by_its_registry_name():
    report = check_equivariance(HeavyBall, **FAST)
    assert report.optimizer == "heavy-ball" and report.verdict == EQUIVARIANT
    plain = check_equivariance(torch.optim.SGD, **FAST)
    assert plain.verdict == EQUIVARIANT and plain.claimed is None


@pytest.mark.parametrize(
    ("optimizer", "kwargs", "match"),
    [
        ("no.such.module:X", {}, "no.such.module"),
        ("torch.optim:NotThere", {}, "NotThere"),
        ("adamm", {}, "known rules: .*adam, adam-p"),
        ("adam", {"group": "bogus"}, "group"),
        ("adam", {"problem": "bogus"}, "problem"),
        ("adam", {"steps": 0}, "steps"),
        ("adam", {"dtype": torch.int64}, "dtype"),
    ],
    ids=["module", "attribute", "rule", "group", "problem", "steps", "dtype"],
)
def test_check_equivariance_rejects_bad_arguments_with_value_error(optimizer, kwargs, match):
    with pytest.raises(ValueError, match=match):
        check_equivariance(optimizer, **kwargs)


@pytest.mark.parametrize("optimizer", [dict, "collections:OrderedDict"])
def test_check_equivariance_rejects_a_non_optimizer_class_with_type_error(optimizer):
    with pytest.raises(TypeError, match=r"torch\.optim\.Optimizer"):
        check_equivariance(optimizer)


@pytest.mark.parametrize("rule", ["gd", "adam", "muon", "shampoo"])
def test_quadratic_problem_gives_the_claimed_orthogonal_verdict(rule):
    report = check_equivariance(rule, problem="quadratic", **FAST)
    assert report.verdict == CLAIMS[rule]["orthogonal"].property


@pytest.mark.parametrize("rule", ["scalar-adam", "shampoo", "adam"])
def test_float32_check_gives_the_claimed_orthogonal_verdict(rule):
    report = check_equivariance(rule, dtype=torch.float32, **FAST)
    assert report.dtype == "float32" and report.tolerance == 1e-5
    assert report.verdict == CLAIMS[rule]["orthogonal"].property

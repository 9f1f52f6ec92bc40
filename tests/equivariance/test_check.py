"""gaugelab.equivariance.check: the twin-triplet certificate and its verdicts."""

import itertools
import json
import sys
from pathlib import Path

import pytest
import torch

from gaugelab.equivariance import (
    BREAKS,
    EQUIVARIANT,
    INCONCLUSIVE,
    NONDETERMINISTIC,
    check_equivariance,
)
from gaugelab.equivariance.check import STILL_ULPS, EquivarianceReport, _verdict
from gaugelab.optim import CLAIMS, OPTIMIZERS, HeavyBall

sys.path.insert(0, str(Path(__file__).parent))
from user_optimizers import (
    ClosureFreeSGD,
    ColumnNormalisedSGD,
    NoOp,
    StepSelfSGD,
)

FAST = {"steps": 5, "draws": 2}
EPS64 = torch.finfo(torch.float64).eps
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


USER_OPTIMIZERS = {
    ClosureFreeSGD: EQUIVARIANT,  # plain SGD: G ↦ G Q under (U Q, V Q)
    StepSelfSGD: EQUIVARIANT,
    NoOp: INCONCLUSIVE,  # nothing moved, so nothing was measured
    ColumnNormalisedSGD: BREAKS,  # column norms of G Q are not those of G
}


@pytest.mark.parametrize(
    ("cls", "verdict"), list(USER_OPTIMIZERS.items()), ids=[c.__name__ for c in USER_OPTIMIZERS]
)
def test_user_optimizer_gets_its_verdict_whether_or_not_step_takes_the_closure(cls, verdict):
    report = check_equivariance(cls, **FAST)
    assert report.verdict == verdict, report.explanation
    assert report.missing_gradients == []


def test_an_optimizer_that_does_not_move_is_inconclusive_and_says_so():
    report = check_equivariance(NoOp, **FAST)
    assert report.factors_moved == 0.0 and report.moved == 0.0
    assert report.explanation.startswith("the optimizer did not move the parameters: ")


def test_a_base_that_barely_moves_is_not_certified():
    # Adam breaks (above); at lr 1e-11 its twins stay within 1e-9 only because nothing moves
    report = check_equivariance("adam", lr=1e-11, **FAST)
    assert max(max(row) for row in report.distances["gauge"]) <= report.tolerance
    assert report.verdict == INCONCLUSIVE and "100 × the tolerance" in report.explanation


def _report(**fields) -> EquivarianceReport:
    steps = 2
    return EquivarianceReport(
        optimizer="synthetic", hyperparameters={}, group="Orthogonal(k=3)", problem="sensing",
        dtype="float64", steps=steps, draws=1, seed=0, noise_scale=1e-7,
        distances={"gauge": [[1e-15] * steps], "identity": [[0.0] * steps],
                   "noise": [[1e-7] * steps]},
        factor_distances=[[0.0] * steps], moved=0.5, tolerance=1e-9, **fields,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"missing_gradients": [1]}, "parameter(s) 1 have no gradient"),
        ({"factors_moved": 0.5 * STILL_ULPS * EPS64}, "did not move the parameters"),
    ],
    ids=["missing-gradient", "below-floor"],
)
def test_gauge_twin_at_round_off_is_not_equivariant_when_nothing_was_measured(fields, reason):
    assert _verdict(_report(factors_moved=0.5), EPS64)[0] == EQUIVARIANT
    verdict, explanation = _verdict(_report(**{"factors_moved": 0.5, **fields}), EPS64)
    assert verdict == INCONCLUSIVE and reason in explanation


def test_module_in_the_current_directory_is_found_and_sys_path_restored(tmp_path, monkeypatch):
    (tmp_path / "gl_cwd_opts.py").write_text(
        "from torch.optim import SGD\n\nclass MySGD(SGD):\n    pass\n"
    )
    monkeypatch.chdir(tmp_path)
    before = list(sys.path)
    report = check_equivariance("gl_cwd_opts:MySGD", steps=2, draws=1)
    assert report.optimizer == "gl_cwd_opts:MySGD" and report.verdict == EQUIVARIANT
    assert sys.path == before


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
    [  # a bad optimizer target: tests/equivariance/test_targets.py
        ("adam", {"group": "bogus"}, "group"),
        ("adam", {"problem": "bogus"}, "problem"),
        ("adam", {"steps": 0}, "steps"),
        ("adam", {"dtype": torch.int64}, "dtype"),
    ],
    ids=["group", "problem", "steps", "dtype"],
)
def test_check_equivariance_rejects_bad_arguments_with_value_error(optimizer, kwargs, match):
    with pytest.raises(ValueError, match=match):
        check_equivariance(optimizer, **kwargs)


@pytest.mark.parametrize("rule", ["gd", "adam", "muon", "shampoo"])
def test_quadratic_problem_gives_the_claimed_orthogonal_verdict(rule):
    report = check_equivariance(rule, problem="quadratic", **FAST)
    assert report.verdict == CLAIMS[rule]["orthogonal"].property


@pytest.mark.parametrize("rule", ["scalar-adam", "shampoo", "adam"])
def test_float32_check_gives_the_claimed_orthogonal_verdict(rule):
    report = check_equivariance(rule, dtype=torch.float32, **FAST)
    assert report.dtype == "float32" and report.tolerance == 1e-5
    assert report.verdict == CLAIMS[rule]["orthogonal"].property


def test_a_rule_that_refuses_the_problem_s_parameters_is_named_with_the_problem():
    # scaled-gd steps factor pairs; the attention problem's 9 matrices are not pairs
    with pytest.raises(
        ValueError,
        match=r"scaled-gd on the 'attention' problem: the optimizer "
        r"refuses the problem's 9 parameters \(\(3, 16\), .*pairs of factors",
    ):
        check_equivariance("scaled-gd", problem="attention", steps=1, draws=1)

"""gaugelab.experiments.sensing.problem, _training and _rates: batched members, stopping and
divergence bookkeeping, the selection rule."""

import math

import pytest
import torch

from gaugelab.errors import NonFiniteError
from gaugelab.experiments.sensing.problem import SensingBatch
from gaugelab.experiments.sensing.rates import select_rate
from gaugelab.experiments.sensing.records import BUDGET, DIVERGED, INTERPOLATED, RuleResult
from gaugelab.experiments.sensing.train import train_rule
from gaugelab.experiments.sensing.zoo import ZooSpec
from gaugelab.tasks import MatrixSensing

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def result(recovery, status, lrs=None):
    """A hand-made RuleResult with ``recovery[s][j]`` and ``status[s][j]``."""
    S, L = len(recovery), len(recovery[0])
    lrs = lrs or [10.0**-j for j in range(L, 0, -1)]
    zeros = [[0.0] * L for _ in range(S)]
    return RuleResult(
        rule="r",
        hyper={},
        decayed=False,
        lrs=lrs,
        seeds=list(range(S)),
        recovery=recovery,
        loss=zeros,
        effective_rank=zeros,
        balancedness=zeros,
        steps=[[0] * L] * S,
        status=status,
        spectra=[[[1.0]] * L] * S,
        curve_steps=[],
        curve_loss=[],
        curve_recovery=[],
    )


IN, B, D = INTERPOLATED, BUDGET, DIVERGED


def test_selection_takes_the_lowest_mean_recovery_among_rates_whose_worst_seed_interpolates():
    # rate 0 has the lowest mean (0.1) but one seed ran out of budget: excluded
    r = result([[0.1, 0.3, 0.2], [0.1, 0.3, 0.3]], [[IN, IN, IN], [B, IN, IN]])
    choice = select_rate(r)
    assert (choice.index, choice.interpolated) == (2, True)  # mean 0.25 < 0.3
    assert choice.lr == r.lrs[2]


def test_selection_breaks_ties_toward_the_smaller_rate():
    r = result([[0.2, 0.2]], [[IN, IN]])
    assert select_rate(r).index == 0


def test_selection_falls_back_to_non_diverged_rates_and_flags_it():
    r = result([[0.1, 0.5, 0.05], [0.2, 0.5, 0.05]], [[B, IN, D], [B, B, IN]])
    choice = select_rate(r)
    assert choice.index == 0 and not choice.interpolated  # rate 2 diverged on seed 0
    assert "no rate interpolates" in choice.reason


def test_selection_reports_when_every_rate_diverged():
    choice = select_rate(result([[0.1, 0.2]], [[D, D]]))
    assert choice.index is None and choice.lr is None and not choice.interpolated


def test_batch_draws_each_seed_exactly_as_the_task_does():
    spec = ZooSpec(n=6, rank=2, seeds=(5, 9), steps=1)
    batch = SensingBatch.build(spec)
    for s, seed in enumerate((5, 9)):
        task = MatrixSensing(n=6, rank=2, seed=seed)
        U, V = task.init_factors()
        assert torch.equal(batch.A[s], task.A) and torch.equal(batch.y[s], task.y)
        assert torch.equal(batch.U0[s], U) and torch.equal(batch.V0[s], V)
    W = torch.randn(2, 3, 6, 6)
    for s in range(2):
        task = MatrixSensing(n=6, rank=2, seed=(5, 9)[s])
        torch.testing.assert_close(batch.loss(W)[s], task.loss(W[s]))
        torch.testing.assert_close(batch.recovery_error(W)[s], task.recovery_error(W[s]))


@pytest.fixture(scope="module")
def small():
    spec = ZooSpec(n=8, rank=2, steps=400, check_every=50, seeds=(42, 123), dtype="float64")
    return spec, SensingBatch.build(spec)


def test_a_member_that_diverges_is_rolled_back_and_frozen_the_others_train_on(small):
    spec, batch = small
    r = train_rule(spec, batch, "gd", [1e-2, 10.0], decay=False)  # 10.0 blows up at once
    for s in range(2):
        assert r.status[s][1] == DIVERGED
        assert r.steps[s][1] < 10  # detected within a few steps, parameters of the step before
        assert math.isfinite(r.loss[s][1]) and r.loss[s][1] <= spec.divergence_loss
        assert r.status[s][0] != DIVERGED
        assert r.loss[s][0] < 1e-2 * r.curve_loss[0][s][0]  # gd at 1e-2 trains on
    assert all(math.isfinite(x) for c in r.curve_loss for row in c for x in row)


def test_an_interpolating_member_stops_at_a_check_step_and_keeps_its_loss(small):
    spec, batch = small
    spec = spec.model_copy(update={"interpolation_loss": 1e-2})  # reached within the budget
    r = train_rule(spec, batch, "adam", [3e-2], decay=False)
    for s in range(2):
        assert r.status[s][0] == INTERPOLATED
        stop = r.steps[s][0]
        assert stop % spec.check_every == 0 and stop < spec.steps
        curve = {step: c[s][0] for step, c in zip(r.curve_steps, r.curve_loss, strict=True)}
        assert curve[stop] < spec.interpolation_loss  # the pre-update loss of step `stop`
        after = [loss for step, loss in curve.items() if step > stop]
        assert set(after) <= {r.loss[s][0]}  # frozen after update `stop`: the final loss


def test_training_is_deterministic_and_members_do_not_interact(small):
    spec, batch = small
    both = train_rule(spec, batch, "scalar-adam", [1e-2, 3e-2], decay=True)
    again = train_rule(spec, batch, "scalar-adam", [1e-2, 3e-2], decay=True)
    assert both.recovery == again.recovery and both.loss == again.loss  # bit for bit
    alone = train_rule(spec, batch, "scalar-adam", [3e-2], decay=True)
    for s in range(2):  # equal up to round-off (BLAS may sum an L-row product differently)
        assert alone.recovery[s][0] == pytest.approx(both.recovery[s][1], rel=1e-9)


def test_decays_follows_the_schedule_field():
    assert ZooSpec().decays("muon", ("muon",)) and not ZooSpec().decays("gd", ("muon",))
    assert ZooSpec(schedule="cosine").decays("gd", ())
    assert not ZooSpec(schedule="constant").decays("muon", ("muon",))


def test_result_round_trips_through_json_with_non_finite_values():
    r = result([[float("nan"), 0.1]], [[D, IN]])
    back = RuleResult.from_dict(r.to_dict())
    assert math.isnan(back.recovery[0][0]) and back.recovery[0][1] == 0.1


def _every_step(lr: float, steps: int) -> dict[int, float]:
    """gd on one seed, the loss at every step: step s → the pre-update loss of step s (the
    loss after s − 1 updates; step 0 is the initial loss too)."""
    spec = ZooSpec(n=8, rank=2, seeds=(42,), steps=steps, check_every=1, dtype="float64",
                   interpolation_loss=1e-300)  # fmt: skip
    r = train_rule(spec, SensingBatch.build(spec), "gd", [lr], decay=False)
    return {step: c[0][0] for step, c in zip(r.curve_steps, r.curve_loss, strict=True)}


def test_the_interpolation_check_reads_the_pre_update_loss_of_the_check_step():
    # The reference (optimizer_zoo_bias.py): at step s it evaluates the loss after s − 1
    # updates, applies update s, then stops if s ≡ 0 (mod 200) and that loss < 1e-7. A
    # threshold between the losses after 199 and after 200 updates is borderline: the check at
    # s = 200 reads the loss after 199 updates (above it), so the run stops at s = 400 with
    # 400 updates applied; reading the loss after 200 updates would stop it at 200.
    loss = _every_step(3e-2, 400)
    after_199, after_200, after_399 = loss[200], loss[201], loss[400]
    assert after_199 > after_200 and after_399 < after_200  # gd is still descending here
    threshold = math.sqrt(after_199 * after_200)
    spec = ZooSpec(n=8, rank=2, seeds=(42,), steps=1000, check_every=200, dtype="float64",
                   interpolation_loss=threshold)  # fmt: skip
    batch = SensingBatch.build(spec)
    r = train_rule(spec, batch, "gd", [3e-2], decay=False)
    assert (r.status, r.steps) == ([[INTERPOLATED]], [[400]])
    assert r.curve_steps == [0, 200, 400]  # every member stopped: the loop ends
    assert r.curve_loss[1][0][0] == after_199 and r.curve_loss[2][0][0] == after_399
    budget = train_rule(spec.model_copy(update={"steps": 400, "interpolation_loss": 1e-300}),
                        batch, "gd", [3e-2], decay=False)  # fmt: skip
    assert r.recovery == budget.recovery  # stopped with exactly the 400 updates of the budget


def test_a_non_finite_initialisation_is_a_numerical_failure():
    spec = ZooSpec(n=6, rank=2, seeds=(42,), steps=10, init_scale=1e200, dtype="float64")
    with pytest.raises(NonFiniteError, match=r"init_scale=1e\+200 in float64"):
        train_rule(spec, SensingBatch.build(spec), "gd", [1e-2], decay=False)
    spec = spec.model_copy(update={"dtype": "float32"})  # 1e200 overflows the factors
    with pytest.raises(NonFiniteError, match="the initial factors"):
        train_rule(spec, SensingBatch.build(spec), "gd", [1e-2], decay=False)


def test_a_last_update_that_diverges_is_rolled_back():
    # gd at 1.0 on this instance: loss 3.3e2 after 5 updates, 1.1e9 after 6 (measured). With a
    # budget of 6, only the check after the loop sees the 6th update cross 1e3
    spec = ZooSpec(n=6, rank=2, seeds=(42,), steps=6, dtype="float64", divergence_loss=1e3)
    r = train_rule(spec, SensingBatch.build(spec), "gd", [1e-2, 1.0], decay=False)
    assert (r.status[0][1], r.steps[0][1]) == (DIVERGED, 5) and r.loss[0][1] <= 1e3
    assert r.status[0][0] == BUDGET

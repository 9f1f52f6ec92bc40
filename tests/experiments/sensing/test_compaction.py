"""Member compaction in the sensing loop: a member that stops leaves the batch, and no remaining
member's number changes — every rule, float32 and float64, bit for bit against the masked
batch; resuming a compacted batch from a checkpoint continues bit for bit."""

from pathlib import Path

import pytest
import torch

from gaugelab.experiments.sensing.problem import SensingBatch
from gaugelab.experiments.sensing.records import BUDGET, DIVERGED, INTERPOLATED
from gaugelab.experiments.sensing.train import train_rule
from gaugelab.experiments.sensing.zoo import ZooSpec
from gaugelab.optim import OPTIMIZERS
from gaugelab.study.checkpoint import load_checkpoint, save_checkpoint

RULES = sorted(OPTIMIZERS)
HYPER = {"adam-p": {"p": 0.5}}


def _spec(dtype: str, **kw) -> ZooSpec:
    base = dict(
        n=8, rank=2, seeds=(1, 2, 3), steps=100, check_every=10, rules=("gd",), convex=False,
        dtype=dtype, interpolation_loss=1e-3,
    )  # fmt: skip
    return ZooSpec(**(base | kw))


def _grid(spec: ZooSpec, rule: str) -> list[float]:
    try:
        grid = list(spec.lr_grids.grid(rule))
    except ValueError:  # a rule without a zoo grid (adam-p: the dial's; scaled-gd)
        grid = [1e-3, 1e-2, 3e-2]
    return [*grid, grid[-1] * 100]  # the last rate diverges for most rules


def _result(spec, batch, rule, **kw) -> dict:
    out = train_rule(spec, batch, rule, _grid(spec, rule), decay=False, hyper=HYPER.get(rule), **kw)
    d = out.to_dict()
    d.pop("seconds")
    return d


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_compacted_batch_equals_masked_batch_bit_for_bit(dtype):
    spec = _spec(dtype)
    batch = SensingBatch.build(spec)
    seen = set()
    for rule in RULES:
        compacted = _result(spec, batch, rule)
        masked = _result(spec, batch, rule, compact=False)
        assert compacted == masked, rule  # every final metric, step, status and curve value
        seen |= {x for row in compacted["status"] for x in row}
        left = [x for row in compacted["steps"] for x in row if x < spec.steps]
        seen |= {"left early"} if left else set()
    assert {BUDGET, DIVERGED, INTERPOLATED, "left early"} <= seen  # the test saw every exit


def test_a_seed_whose_members_all_stopped_costs_no_product():
    spec = _spec("float64", interpolation_loss=1e-1, steps=200)
    batch = SensingBatch.build(spec)
    calls = []
    real = batch.member_loss_and_grad

    def counting(U, V, rows, width, **kw):
        calls.append(torch.unique(rows // width).numel())
        return real(U, V, rows, width, **kw)

    object.__setattr__(batch, "member_loss_and_grad", counting)
    result = train_rule(spec, batch, "adam", [1e-2, 3e-2], decay=False)
    assert any(s < spec.steps for row in result.steps for s in row)
    assert min(calls) < len(spec.seeds)  # products ran for fewer seeds once some had stopped


class _Interrupted(Exception):
    pass


class _FakeRun:
    """A run context keeping its checkpoints in a folder; optionally interrupted at a step."""

    identity = "f" * 64

    def __init__(self, folder: Path, stop_at: int | None = None) -> None:
        self.folder, self.stop_at = folder, stop_at

    def checkpoint(self, step, *, scope, model_state, optimizer_state, extra, **_):
        save_checkpoint(
            self.folder / scope, step=step, model_state=model_state,
            optimizer_state=optimizer_state, rng_states={}, data_position=0, extra=extra,
        )  # fmt: skip

    def resume(self, scope=""):
        folder = self.folder / scope
        return load_checkpoint(folder) if folder.is_dir() and any(folder.iterdir()) else None

    def progress(self, label, step, total):
        if self.stop_at is not None and step >= self.stop_at:
            raise _Interrupted


def test_a_compacted_batch_resumes_bit_for_bit(tmp_path):
    spec = _spec("float32", steps=300, interpolation_loss=1e-1)
    batch = SensingBatch.build(spec)
    lrs = _grid(spec, "adam")

    def run(ctx):
        out = train_rule(spec, batch, "adam", lrs, decay=True, run=ctx, checkpoint_every=50)
        d = out.to_dict()
        d.pop("seconds")
        return d

    clean = run(_FakeRun(tmp_path / "clean"))
    with pytest.raises(_Interrupted):
        run(_FakeRun(tmp_path / "killed", stop_at=175))
    saved = load_checkpoint(tmp_path / "killed" / "adam")
    assert saved.model_state["rows"].numel() < len(lrs) * len(spec.seeds)  # members had left
    assert run(_FakeRun(tmp_path / "killed")) == clean


def test_compact_reindexes_parameters_rates_and_state():
    from gaugelab.optim import MemberLearningRates, make_optimizer

    torch.manual_seed(0)
    U = torch.randn(5, 3, 2, dtype=torch.float64)
    inner = make_optimizer("adam", [U], lr=1.0, member_dims=1)
    opt = MemberLearningRates(
        inner, torch.tensor([1e-3, 2e-3, 3e-3, 4e-3, 5e-3], dtype=torch.float64)
    )
    U.grad = torch.randn_like(U)
    opt.step()
    state = {k: v.clone() for k, v in inner.state[U].items()}
    before, grad, keep = U.detach().clone(), U.grad.clone(), torch.tensor([0, 2, 4])
    opt.compact(keep)
    assert torch.equal(U, before[keep]) and torch.equal(U.grad, grad[keep])
    assert torch.equal(opt.lr, torch.tensor([1e-3, 3e-3, 5e-3], dtype=torch.float64))
    assert torch.equal(inner.state[U]["exp_avg"], state["exp_avg"][keep])
    assert torch.equal(inner.state[U]["step"], state["step"])  # not a member tensor
    with pytest.raises(ValueError, match=r"keep=\[2, 1\]; allowed: increasing indices in \[0, 3\)"):
        opt.compact(torch.tensor([2, 1]))
    V = torch.zeros(2, 2, 3)
    two = MemberLearningRates(make_optimizer("gd", [V], lr=1.0, member_dims=2), torch.ones(2, 2))
    with pytest.raises(ValueError, match="one member dim"):
        two.compact(torch.tensor([0]))


@pytest.mark.parametrize("present", ["all", "some"])
def test_the_closed_form_gradients_are_autograds(present):
    """member_loss_and_grad's hand-written ∇_U, ∇_V of mean((A vec(U Vᵀ) − y)²) against
    autograd of the same loss, float64, with every member present and with a compacted batch."""
    spec = _spec("float64")
    batch = SensingBatch.build(spec)
    S, width, n, k = len(spec.seeds), 4, spec.n, spec.rank
    g = torch.Generator().manual_seed(0)
    rows = torch.arange(S * width) if present == "all" else torch.tensor([1, 2, 9, 11])
    U = torch.randn(rows.numel(), n, k, generator=g, dtype=torch.float64, requires_grad=True)
    V = torch.randn(rows.numel(), n, k, generator=g, dtype=torch.float64, requires_grad=True)
    loss, grad_U, grad_V = batch.member_loss_and_grad(U.detach(), V.detach(), rows, width)
    seed = rows // width
    fitted = ((U @ V.mT).flatten(-2)[:, None, :] @ batch.AT[seed]).squeeze(1) - batch.y[seed]
    reference = (fitted * fitted).mean(dim=-1)
    reference.sum().backward()
    torch.testing.assert_close(loss, reference.detach(), rtol=1e-11, atol=1e-11)
    torch.testing.assert_close(grad_U, U.grad, rtol=1e-11, atol=1e-11)
    torch.testing.assert_close(grad_V, V.grad, rtol=1e-11, atol=1e-11)
    assert U.grad.abs().max() > 1e-3  # the check compared gradients that are not all zero

"""The matrix-sensing zoo: each rule's (seed × rate) ensemble against a fair per-run peer.

The peer runs every member as the reference scripts do: one run at a time, plain tensors, the
closed-form gradient (two matrix–vector products with the seed's measurement matrix), a
hand-written dense update for the rule, the loss read every step for the divergence check and
the interpolation check every ``check_every`` steps — nothing else in the step. Before timing,
each rule's peer is checked against the zoo's own rule on one member in float64 (20 steps, the
factors agree to 1e-9 relative), so the peer computes what ours does.

Both sides run the docs/protocols.md §3 problem (n = 40, 3 seeds, each rule's grid, float32)
with a reduced step budget, every member to its own stop (interpolation, divergence, budget);
the cost that counts is per *model-step*: the seconds over the sum of each member's steps to
its stop. Each rule's two sides are timed interleaved, round by round, after a warm-up
(``gaugelab.cli.bench.time_calls``); the whole-zoo row adds the rules' times round by round
(the ratio of the totals is the full zoo's, whose per-member step counts the reduced budget
stands in for). The measurement products are reported as achieved GFLOP/s beside the rate MKL
reaches on the same product shape alone and on a 512³ matrix product, in the same run.
Targets (issue "faster than the reference scripts"): the whole zoo ≥ 2× the peer; ≤ 90 µs per
member-step at E = 12.
"""

from __future__ import annotations

import math

import torch

from gaugelab.cli.bench import Timing, ratio_cell, time_calls
from gaugelab.experiments.sensing.problem import SensingBatch
from gaugelab.experiments.sensing.train import train_rule
from gaugelab.experiments.sensing.zoo import ZooSpec
from gaugelab.linalg import psd_power
from gaugelab.optim import cosine_factor
from gaugelab.tasks import MatrixSensing

TITLE = "zoo: (seed × rate) ensemble per rule vs the fair per-run peer (n = 40, float32)"
COLUMNS = [
    "rule",
    "members",
    "model-steps that count",
    "ours µs/model-step",
    "peer µs/model-step",
    "ratio (peer / ours)",
]
B1, B2, EPS = 0.9, 0.999, 1e-8


def _msign_ns(b: torch.Tensor) -> torch.Tensor:
    """Muon's 5-step Newton–Schulz msign (docs/protocols.md §1), for a square or wide matrix."""
    a, bb, c = 3.4445, -4.7750, 2.0315
    x = b / (torch.linalg.matrix_norm(b) + 1e-7)
    tall = x.shape[-2] > x.shape[-1]
    x = x.mT if tall else x
    for _ in range(5):
        gram = x @ x.mT
        x = a * x + (bb * gram + c * gram @ gram) @ x
    return x.mT if tall else x


def _peer_step(rule: str, params, grads, state: dict, lr: float, t: int) -> None:
    """One hand-written dense update of ``rule`` (docs/protocols.md §1) at 1-based step ``t``."""
    if rule == "gd":
        for p, g in zip(params, grads, strict=True):
            p.sub_(g, alpha=lr)
    elif rule in ("adam", "scalar-adam"):
        bc1, bc2 = 1 - B1**t, math.sqrt(1 - B2**t)
        ms = state.setdefault("m", [torch.zeros_like(p) for p in params])
        vs = state.setdefault("v", [torch.zeros_like(p) for p in params])
        for m, v, g in zip(ms, vs, grads, strict=True):
            m.lerp_(g, 1 - B1)
            v.mul_(B2).addcmul_(g, g, value=1 - B2)
        if rule == "adam":
            for p, m, v in zip(params, ms, vs, strict=True):
                p.addcdiv_(m, v.sqrt().div_(bc2).add_(EPS), value=-lr / bc1)
        else:  # one shared scalar: s = √(mean v̂ over every entry of both factors) + ε
            pooled = sum(float(v.sum()) for v in vs) / sum(v.numel() for v in vs)
            s = math.sqrt(pooled) / bc2 + EPS
            for p, m in zip(params, ms, strict=True):
                p.sub_(m, alpha=lr / (bc1 * s))
    elif rule == "rmsprop":
        vs = state.setdefault("v", [torch.zeros_like(p) for p in params])
        for p, v, g in zip(params, vs, grads, strict=True):
            v.mul_(0.99).addcmul_(g, g, value=0.01)
            p.addcdiv_(g, v.sqrt().add_(EPS), value=-lr)
    elif rule == "signum":
        ms = state.setdefault("m", [torch.zeros_like(p) for p in params])
        for p, m, g in zip(params, ms, grads, strict=True):
            m.mul_(0.9).add_(g, alpha=0.1)
            p.sub_(m.sign(), alpha=lr)
    elif rule == "lion":
        ms = state.setdefault("m", [torch.zeros_like(p) for p in params])
        for p, m, g in zip(params, ms, grads, strict=True):
            p.sub_((m * 0.9 + g * 0.1).sign_(), alpha=lr)
            m.mul_(0.99).add_(g, alpha=0.01)
    elif rule == "adafactor":
        rs = state.setdefault("r", [p.new_zeros(p.shape[0]) for p in params])
        cs = state.setdefault("c", [p.new_zeros(p.shape[1]) for p in params])
        for p, r, c, g in zip(params, rs, cs, grads, strict=True):
            g2 = g * g
            r.lerp_(g2.mean(dim=-1), 1 - B2)
            c.lerp_(g2.mean(dim=-2), 1 - B2)
            v = torch.outer(r, c) / (r.mean() + 1e-30)
            p.addcdiv_(g, v.sqrt_().add_(EPS), value=-lr)
    elif rule == "muon":
        bs = state.setdefault("b", [torch.zeros_like(p) for p in params])
        for p, b, g in zip(params, bs, grads, strict=True):
            b.mul_(0.9).add_(g)
            p.sub_(_msign_ns(b), alpha=lr)
    elif rule == "shampoo":
        ls = state.setdefault("L", [p.new_zeros(p.shape[0], p.shape[0]) for p in params])
        rs = state.setdefault("R", [p.new_zeros(p.shape[1], p.shape[1]) for p in params])
        for i, (p, left, right, g) in enumerate(zip(params, ls, rs, grads, strict=True)):
            left.add_(g @ g.T)
            right.add_(g.T @ g)
            if (t - 1) % 20 == 0:
                state[("roots", i)] = (
                    psd_power(left, -0.25, damping=1.0, clamp=1e-6),
                    psd_power(right, -0.25, damping=1.0, clamp=1e-6),
                )
            lroot, rroot = state[("roots", i)]
            p.sub_(lroot @ g @ rroot, alpha=lr)
    else:
        raise ValueError(f"bench zoo: no hand-written peer for rule {rule!r}")


def _peer_run(spec, task, rule, lr, decay, U, V) -> int:
    """One member to its own stop; returns its model-steps (as the ensemble counts them)."""
    A, AT, y = task.A, task.A.T.contiguous(), task.y
    m, shape, state = y.numel(), (U.shape[0], V.shape[0]), {}
    for t in range(spec.steps):
        s = t + 1
        r = (U @ V.T).reshape(-1) @ AT - y
        loss = float(r @ r) / m
        if not math.isfinite(loss) or loss > spec.divergence_loss:
            return max(t - 1, 0)
        G = (r @ A).view(shape) * (2.0 / m)
        eta = lr * cosine_factor(s, spec.steps) if decay else lr
        _peer_step(rule, (U, V), (G @ V, G.T @ U), state, eta, s)
        if s % spec.check_every == 0 and loss < spec.interpolation_loss:
            return s
    return spec.steps


def _peer(spec, tasks, rule, lrs, decay) -> int:
    """Every (seed, rate) member of ``rule`` one after another; the model-steps that count."""
    counted = 0
    for task in tasks:
        U0, V0 = task.init_factors()
        for lr in lrs:
            counted += _peer_run(spec, task, rule, lr, decay, U0.clone(), V0.clone())
    return counted


def _check_peer(rule: str, decay: bool) -> None:
    """The peer's update is the zoo rule's: 20 float64 steps on one member, 1e-9 relative."""
    spec = ZooSpec(steps=20, check_every=10, dtype="float64", seeds=(42,), convex=False)
    batch = SensingBatch.build(spec)
    lr = spec.lr_grids.grid(rule)[0]
    ours = train_rule(spec, batch, rule, [lr], decay=decay)
    task = MatrixSensing(n=spec.n, rank=spec.rank, seed=42, dtype=torch.float64)
    U, V = task.init_factors()
    _peer_run(spec, task, rule, lr, decay, U, V)
    W = (U @ V.T).reshape(-1) @ task.A.T - task.y
    peer_loss = float(W @ W) / task.y.numel()
    if not math.isclose(peer_loss, ours.loss[0][0], rel_tol=1e-9):
        raise AssertionError(f"bench zoo: the {rule} peer computes another rule: loss after 20 "
                             f"steps {peer_loss!r} vs the zoo's {ours.loss[0][0]!r}")  # fmt: skip


def _gflops(seconds_per_step: float, members: int, n: int, m: int) -> float:
    return 2 * 2 * members * n * n * m / seconds_per_step / 1e9  # two products per member-step


def _matmul_rates(n2: int, m: int, rows: int) -> tuple[float, float]:
    """MKL's GFLOP/s on one seed's product shape ``[rows, n²] @ [n², m]`` and on 512³."""
    A, W = torch.randn(n2, m), torch.randn(rows, n2)
    big = torch.randn(512, 512)
    t = time_calls({"shape": lambda: W @ A, "big": lambda: big @ big}, number=20, repeat=5)
    return 2 * rows * n2 * m / t["shape"].median / 1e9, 2 * 512**3 / t["big"].median / 1e9


def run(*, quick: bool = False, progress=None) -> list[list]:
    steps, repeat = (300, 2) if quick else (2000, 3)
    spec = ZooSpec(steps=steps)
    rules = ("gd", "adam", "muon") if quick else spec.rules
    tasks = [MatrixSensing(n=spec.n, rank=spec.rank, seed=s) for s in spec.seeds]
    batch = SensingBatch.build(spec)
    task = progress.add_task("zoo", total=len(rules)) if progress else None
    rows, ours_all, peer_all, counted_all, members_all = [], [], [], 0, 0
    for rule in rules:
        lrs, decay = spec.lr_grids.grid(rule), spec.decays(rule, spec.decayed)
        _check_peer(rule, decay)
        counted = sum(sum(r) for r in train_rule(spec, batch, rule, lrs, decay=decay).steps)
        t = time_calls(
            {"ours": lambda: train_rule(spec, batch, rule, lrs, decay=decay),  # noqa: B023
             "peer": lambda: _peer(spec, tasks, rule, lrs, decay)},  # noqa: B023
            number=1,
            repeat=repeat,
            warmup=0,
        )  # fmt: skip
        ours, peer = (Timing(tuple(x / counted for x in t[k].samples)) for k in ("ours", "peer"))
        ours_all.append(t["ours"])
        peer_all.append(t["peer"])
        counted_all += counted
        members = len(spec.seeds) * len(lrs)
        members_all += members
        rows.append([rule, members, counted, ours.cell(1e6, 1), peer.cell(1e6, 1),
                     ratio_cell(peer, ours)])  # fmt: skip
        if progress:
            progress.advance(task)
    total = {
        k: Timing(tuple(sum(r) / counted_all for r in zip(*(x.samples for x in side), strict=True)))
        for k, side in (("ours", ours_all), ("peer", peer_all))
    }
    rows.append([f"whole zoo ({len(rules)} rules, {steps} steps)", members_all, counted_all,
                 total["ours"].cell(1e6, 1), total["peer"].cell(1e6, 1),
                 ratio_cell(total["peer"], total["ours"])])  # fmt: skip
    gd_lrs = spec.lr_grids.grid("gd")
    width = len(gd_lrs)
    full = ZooSpec(steps=100, check_every=10**9, interpolation_loss=1e-30)
    t = time_calls(
        {"step": lambda: train_rule(full, batch, "gd", [x / 100 for x in gd_lrs], decay=False)},
        number=1, repeat=repeat,
    )  # fmt: skip
    members = len(spec.seeds) * width
    per_step = t["step"].median / 100
    m = batch.y.shape[-1]
    shape_rate, big_rate = _matmul_rates(spec.n * spec.n, m, width)
    rows.append([f"gd, E = {members}, no member stops", members, 100 * members,
                 f"{per_step / members * 1e6:.1f}", "", ""])  # fmt: skip
    rows.append([f"products: {_gflops(per_step, members, spec.n, m):.1f} GFLOP/s in the step; "
                 f"MKL {shape_rate:.1f} on [{width}, {spec.n**2}]×[{spec.n**2}, {m}] alone, "
                 f"{big_rate:.1f} on 512³", "", "", "", "", ""])  # fmt: skip
    threads = torch.get_num_threads()
    rows.append([f"{threads} torch thread{'s' if threads > 1 else ''} on both sides",
                 "", "", "", "", ""])  # fmt: skip
    return rows

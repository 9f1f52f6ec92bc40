"""Kernel drift without materialising the kernel, on the attention-twin Transformer.

The model is the twin protocol's (docs/protocols.md §5: 2 blocks, d_model 64, 4 heads, every
weight trained, P = 104,896 parameters) at its seed-42 initialization ``θ_0`` and after 10
full-batch Adam steps (η = 1e-3) on the 883 training equations ``θ_t``; outputs are the 47
answer logits at the last position of the 1,326 validation equations, stacked example then
output (``N·C = 62,322`` rows: a dense Jacobian would hold 62,322 × 104,896 floats, 26 GB).

(a) At the largest probe size where the dense peer fits the machine's budget (N = 32
examples, 2 × 630 MB of Jacobians; N = 8 with ``--quick``): ``D_K = ‖K_t − K_0‖_F / ‖K_0‖_F``
by the probe estimator (:class:`gaugelab.lowrank.kernels.explanation.KernelProbes`, Q Rademacher
output
probes, two VJPs and two JVPs each, plus ``R_lin`` and ``D_J``) against the peer that forms
``J_0`` and ``J_t`` densely (``torch.func.jacrev``) and contracts ``K = J Jᵀ``: time, peak
memory (target: peer / ours ≥ 50×), and the two values (the estimate must lie within 4
standard errors of the dense value, or the benchmark fails).

(b) The estimator alone on the full validation set (N = 1,326; 300 with ``--quick``): time and
peak memory (target ≤ 2 GB).

Peak memory is the peak of live torch CPU allocations during one call, from ``torch.profiler``
(``profile_memory=True``; every op's own allocations and frees in time order): tensors and the
work arrays torch allocates, not the interpreter. Torch's fused attention has no forward-mode
AD, so both sides run the attention's plain-ops path (the estimator detects and records it).
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from gaugelab.cli.bench import peak_mib, ratio_cell, time_calls
from gaugelab.determinism import deterministic
from gaugelab.experiments.twins.run import twin_model_config
from gaugelab.lowrank.kernels.explanation import (
    KernelProbes,
    Metric,
    StackedOutputs,
    empirical_jacobian,
    empirical_kernel,
    kernel_drift,
)
from gaugelab.models import Transformer
from gaugelab.tasks import ModularArithmetic

TITLE = "Kernel drift D_K on the twin Transformer: JVP/VJP probe estimator vs dense Jacobians"
COLUMNS = ["case", "ours", "ours s", "peer", "peer s", "time ratio (peer / ours)",
           "peak MiB ours / peer", "memory ratio (peer / ours)", "target",
           "D_K ours ± se / peer"]  # fmt: skip
PROBES = 8


def _points():
    """The twin model, its validation inputs, ``θ_0`` and ``θ_t`` (10 Adam steps)."""
    task = ModularArithmetic(47, train_fraction=0.4, seed=42)
    model = Transformer(twin_model_config(), seed=42)
    theta0 = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(10):
        opt.zero_grad(set_to_none=True)
        logits = model(task.train_inputs)[:, -1]
        F.cross_entropy(logits, task.train_labels).backward()
        opt.step()
    theta_t = {n: p.detach().clone() for n, p in model.named_parameters()}
    return model, task.val_inputs, theta0, theta_t


def _estimate(model, inputs, theta0, theta_t):
    out = StackedOutputs(model, inputs, selector="answer logits (last position)")
    probes = KernelProbes(out, theta0, probes=PROBES, seed=0)
    return probes.estimate(theta_t, metric=Metric.identity()), out


def _dense(model, inputs, theta0, theta_t):
    out = StackedOutputs(model, inputs)
    out.forward_mode = "plain attention"  # the same computation as the estimator's
    big = out.size * out.n_parameters + 1
    J0 = empirical_jacobian(out, theta0, max_entries=big)
    Jt = empirical_jacobian(out, theta_t, max_entries=big)
    return kernel_drift(empirical_kernel(Jt), empirical_kernel(J0))


def run(*, quick: bool = False, progress=None) -> list[list]:
    n_dense, n_full = (8, 300) if quick else (32, 1326)
    task = progress.add_task("kernel", total=3) if progress else None
    with deterministic():
        model, val, theta0, theta_t = _points()
        sub = val[:n_dense]
        times = time_calls(
            {"ours": lambda: _estimate(model, sub, theta0, theta_t),
             "peer": lambda: _dense(model, sub, theta0, theta_t)},
            number=1, repeat=1 if not quick else 2, warmup=0,
        )  # fmt: skip
        if progress:
            progress.advance(task)
        mine, (est, out) = peak_mib(lambda: _estimate(model, sub, theta0, theta_t))
        peer, exact = peak_mib(lambda: _dense(model, sub, theta0, theta_t))
        if abs(est.d_k.value - exact) > 4 * est.d_k.stderr:
            raise AssertionError(
                f"bench kernel: the probe estimate D_K = {est.d_k.value:.4g} ± "
                f"{est.d_k.stderr:.2g} is not within 4 standard errors of the dense {exact:.4g}"
            )
        if progress:
            progress.advance(task)
        start = time.perf_counter()
        full_peak, (full, full_out) = peak_mib(lambda: _estimate(model, val[:n_full], theta0,
                                                                 theta_t))  # fmt: skip
        seconds = time.perf_counter() - start
        if progress:
            progress.advance(task)
    P = out.n_parameters
    caveat = " (quick sizes: not comparable with the target)" if quick else ""
    full_n = "all N = 1,326" if n_full == 1326 else f"N = {n_full} of 1,326"
    dense_rows = [
        f"D_K, N = {n_dense} of 1,326 (N·C = {out.size:,}, P = {P:,}; forward mode "
        f"{out.forward_mode})",
        f"probes, Q = {PROBES}", times["ours"].cell(scale=1, digits=2),
        "dense J_0, J_t (jacrev) + J Jᵀ", times["peer"].cell(scale=1, digits=2),
        ratio_cell(times["peer"], times["ours"], digits=1), f"{mine:.1f} / {peer:.0f}",
        f"{peer / mine:.0f}×" if mine > 0 else "—", f"memory ≥ 50× at N = 32{caveat}",
        f"{est.d_k.value:.4g} ± {est.d_k.stderr:.2g} / {exact:.4g}",
    ]  # fmt: skip
    full_row = [
        f"D_K, {full_n} validation examples (N·C = {full_out.size:,}; dense J would be "
        f"{full_out.size * P * 4 / 2**30:.2g} GiB)",
        f"probes, Q = {PROBES}", f"{seconds:.1f}", "— (does not fit)", "—", "—",
        f"{full_peak:.0f} / —", "—", f"peak ≤ 2048 MiB at N = 1,326{caveat}",
        f"{full.d_k.value:.4g} ± {full.d_k.stderr:.2g}; R_lin {full.r_lin:.3g}, "
        f"D_J {full.d_j.value:.3g}, A_K {full.a_k.value:.4g}",
    ]  # fmt: skip
    return [dense_rows, full_row]

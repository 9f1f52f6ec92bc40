"""The kernel diagnostics at scale: JVPs, VJPs and seeded output probes, never a dense J or K.

``K z = J M (Jᵀ z)``: one VJP, the metric, one JVP. ``‖A‖²_F = E‖A z‖²`` for probes with
``E[z zᵀ] = I`` (Rademacher or Gaussian), so with ``Q`` fixed probes ``z_q``

- ``‖K_t − K_0‖²_F ≈ (1/Q) Σ ‖(K_t − K_0) z_q‖²`` and ``‖K_0‖²_F ≈ (1/Q) Σ ‖K_0 z_q‖²``,
- ``⟨K_t, K_0⟩_F ≈ (1/Q) Σ (K_t z_q)·(K_0 z_q)`` (``E[zᵀ K_tᵀ K_0 z] = tr(K_tᵀ K_0)``),
- ``‖J_t − J_0‖²_F ≈ (1/Q) Σ ‖(J_t − J_0)ᵀ z_q‖²`` (VJPs only),

and ``D_J``, ``D_K``, ``A_K`` are the ratios of these means, their standard errors the
jackknife over the ``Q`` probes (leave one probe out). ``R_lin`` needs no probe: ``F_lin =
F_0 + J_0(θ_t − θ_0)`` is one JVP, exact. Memory is that of a few forward passes and ``Q``
parameter-sized vectors.

Source: seed 003 §0x09J (the diagnostics), §0x09K (the estimator and its record).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass

import torch

from gaugelab.lowrank.kernels.outputs import Metric, Params, StackedOutputs

DISTRIBUTIONS = ("rademacher", "gaussian")
EPS = 1e-12


def _norm2(x: Mapping[str, torch.Tensor] | torch.Tensor) -> float:
    if isinstance(x, torch.Tensor):
        return float(x.double().pow(2).sum())
    return sum(float(v.double().pow(2).sum()) for v in x.values())


def _sub(a: Params, b: Params) -> Params:
    return {k: a[k] - b[k] for k in a}


def kernel_matvec(
    outputs: StackedOutputs, theta: Mapping[str, torch.Tensor], z: torch.Tensor, *, metric: Metric
) -> torch.Tensor:
    """``K_M(θ) z = J M Jᵀ z`` ``[N·C]`` by one VJP and one JVP.

    Args:
        outputs: the declared :class:`StackedOutputs`; theta: the trained parameters.
        z: ``[N·C]`` output vector.
        metric: the optimizer metric (``Metric.identity()`` for plain SGD; required, so ``J Jᵀ``
            is never used silently).

    Raises:
        ValueError: ``z`` not ``[N·C]``.

    Source: seed 003 §0x09K.
    """
    return outputs.jvp(theta, metric.apply(outputs.vjp(theta, z)))[1]


def linearized_outputs(
    outputs: StackedOutputs,
    theta0: Mapping[str, torch.Tensor],
    theta_t: Mapping[str, torch.Tensor],
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(F_0, F_lin)`` with ``F_lin = F_0 + J_0 (θ_t − θ_0)`` by one JVP at ``θ_0``.

    Returns:
        ``([N·C], [N·C])`` detached. Source: seed 003 §0x09B, §0x09K; §0x0AJ (the linearized
        full-update object).
    """
    f0, jv = outputs.jvp(theta0, _sub(dict(theta_t), dict(theta0)))
    return f0.detach(), (f0 + jv).detach()


@dataclass(frozen=True)
class Estimate:
    """An estimated diagnostic: ``value ± stderr`` (jackknife over the probes)."""

    value: float
    stderr: float


@dataclass(frozen=True)
class KernelEstimate:
    """The four diagnostics at one checkpoint, and the estimator's record.

    Attributes:
        r_lin: ``R_lin`` (exact: one JVP, no probes).
        d_j, d_k, a_k: :class:`Estimate` of ``D_J``, ``D_K``, ``A_K``.
        parameter_distance: ``‖θ_t − θ_0‖₂`` (gauge-sensitive; recorded, never a diagnostic).
        output_change: ``‖F_t − F_0‖₂``.
        probes, seed, distribution: the output probes (``Q``, their generator's seed, law).
        metric, base_metric, approximation: the metric of ``K_t`` and of ``K_0``, and what
            they stand for.
        axes: :meth:`StackedOutputs.axes` (examples, outputs, order, parameters, forward mode).
        dtype: the computation's dtype.

    Source: seed 003 §0x09J, §0x09K (probe distribution, Q, seed, stacking, dtype and the
    estimator's uncertainty are part of the result).
    """

    r_lin: float
    d_j: Estimate
    d_k: Estimate
    a_k: Estimate
    parameter_distance: float
    output_change: float
    probes: int
    seed: int
    distribution: str
    metric: str
    base_metric: str
    approximation: str
    axes: dict
    dtype: str

    def as_dict(self) -> dict:
        """JSON-able."""
        return asdict(self)


def _jackknife(stats: torch.Tensor, fn) -> Estimate:
    """``fn(mean of stats)`` and its jackknife standard error; ``stats`` ``[Q, k]``."""
    Q = stats.shape[0]
    total = stats.sum(0)
    value = fn(total / Q)
    loo = torch.stack([torch.as_tensor(fn((total - stats[q]) / (Q - 1))) for q in range(Q)])
    se = math.sqrt((Q - 1) / Q * float(((loo - loo.mean()) ** 2).sum()))
    return Estimate(float(value), se)


class KernelProbes:
    """Seeded output probes frozen at the base point ``θ_0``, reused at every checkpoint.

    Args:
        outputs: the declared :class:`StackedOutputs`.
        theta0: the base point (initialization) — a name → tensor mapping.
        probes: ``Q ≥ 2`` output probes.
        seed: their generator's seed.
        distribution: ``rademacher`` (±1) or ``gaussian`` (standard normal).
        eps: the ``ε`` floor of every denominator.

    Attributes:
        F0: ``F(θ_0)`` ``[N·C]``; z: ``[Q, N·C]``; J0T_z: the ``Q`` VJPs ``J_0ᵀ z_q``.

    Raises:
        ValueError: ``probes < 2`` or an unknown distribution.

    Source: seed 003 §0x09K.
    """

    def __init__(
        self,
        outputs: StackedOutputs,
        theta0: Mapping[str, torch.Tensor],
        *,
        probes: int = 8,
        seed: int = 0,
        distribution: str = "rademacher",
        eps: float = EPS,
    ) -> None:
        if not isinstance(probes, int) or probes < 2:
            raise ValueError(f"KernelProbes: probes={probes!r}; allowed: an integer >= 2")
        if distribution not in DISTRIBUTIONS:
            raise ValueError(
                f"KernelProbes: distribution={distribution!r}; allowed: {', '.join(DISTRIBUTIONS)}"
            )
        self.outputs, self.probes, self.seed, self.distribution, self.eps = (
            outputs, probes, seed, distribution, eps)  # fmt: skip
        self.theta0 = {k: v.detach() for k, v in theta0.items()}
        dtype = next(iter(self.theta0.values())).dtype
        self.dtype = dtype
        gen = torch.Generator().manual_seed(seed)
        shape = (probes, outputs.size)
        if distribution == "rademacher":
            z = torch.randint(0, 2, shape, generator=gen).to(dtype) * 2 - 1
        else:
            z = torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype)
        self.z = z
        with torch.no_grad():
            self.F0 = outputs(self.theta0).detach()
        self.J0T_z = [self._detach(outputs.vjp(self.theta0, z[q])) for q in range(probes)]
        self._K0_z: dict[str, list[torch.Tensor]] = {}

    @staticmethod
    def _detach(p: Params) -> Params:
        return {k: v.detach() for k, v in p.items()}

    def base_kernel_products(self, metric: Metric) -> list[torch.Tensor]:
        """``K_0 z_q = J_0 M J_0ᵀ z_q`` for every probe (cached per metric name)."""
        if metric.name not in self._K0_z:
            self._K0_z[metric.name] = [
                self.outputs.jvp(self.theta0, metric.apply(v))[1].detach() for v in self.J0T_z
            ]
        return self._K0_z[metric.name]

    def estimate(
        self,
        theta_t: Mapping[str, torch.Tensor],
        *,
        metric: Metric,
        base_metric: Metric | None = None,
    ) -> KernelEstimate:
        """``R_lin``, and ``D_J``, ``D_K``, ``A_K`` with standard errors, at ``θ_t``.

        Args:
            theta_t: the checkpoint's trained parameters.
            metric: ``M_t`` of ``K_t = J_t M_t J_tᵀ`` (required: never silently ``J Jᵀ``).
            base_metric: ``M`` of ``K_0 = J_0 M J_0ᵀ`` (default: ``metric``, so ``D_K`` is the
                feature drift under one declared metric).

        Returns:
            The :class:`KernelEstimate`.

        Raises:
            ValueError: ``theta_t`` has other parameters than ``θ_0``, or ``F(θ_t)`` is not
                finite.
        """
        if set(theta_t) != set(self.theta0):
            raise ValueError(
                f"KernelProbes.estimate: theta_t has {sorted(theta_t)}; allowed: the base "
                f"point's parameters {sorted(self.theta0)}"
            )
        base_metric = metric if base_metric is None else base_metric
        out, eps = self.outputs, self.eps
        theta_t = {k: v.detach() for k, v in theta_t.items()}
        same = all(torch.equal(theta_t[k], self.theta0[k]) for k in theta_t)
        if same and base_metric.name == metric.name:
            return self._at_base(metric)
        _, jv = out.jvp(self.theta0, _sub(theta_t, self.theta0))
        F_lin = self.F0 + jv.detach()
        with torch.no_grad():
            Ft = out(theta_t).detach()
        if not bool(torch.isfinite(Ft).all()):
            raise ValueError("KernelProbes.estimate: F(theta_t) has non-finite entries")
        change = math.sqrt(_norm2(Ft - self.F0))
        r_lin = math.sqrt(_norm2(Ft - F_lin)) / max(change, eps)
        K0_z = self.base_kernel_products(base_metric)
        rows = []
        for q in range(self.probes):
            JtT_z = self._detach(out.vjp(theta_t, self.z[q]))
            Kt_z = out.jvp(theta_t, metric.apply(JtT_z))[1].detach()
            k0 = K0_z[q]
            rows.append([
                _norm2(_sub(JtT_z, self.J0T_z[q])), _norm2(self.J0T_z[q]),
                _norm2(Kt_z - k0), _norm2(k0), _norm2(Kt_z), float(Kt_z.double() @ k0.double()),
            ])  # fmt: skip
        stats = torch.tensor(rows, dtype=torch.float64)
        d_j = _jackknife(
            stats, lambda m: math.sqrt(max(float(m[0]), 0.0)) / max(math.sqrt(float(m[1])), eps)
        )
        d_k = _jackknife(
            stats, lambda m: math.sqrt(max(float(m[2]), 0.0)) / max(math.sqrt(float(m[3])), eps)
        )
        a_k = _jackknife(
            stats,
            lambda m: float(m[5]) / max(math.sqrt(max(float(m[4]) * float(m[3]), 0.0)), eps),
        )  # fmt: skip
        distance = math.sqrt(_norm2(_sub(theta_t, self.theta0)))
        approximation = metric.approximation
        if base_metric.name != metric.name:
            approximation += f"; K_0 under {base_metric.name}: {base_metric.approximation}"
        return KernelEstimate(
            r_lin=r_lin, d_j=d_j, d_k=d_k, a_k=a_k, parameter_distance=distance,
            output_change=change, probes=self.probes, seed=self.seed,
            distribution=self.distribution, metric=metric.name, base_metric=base_metric.name,
            approximation=approximation, axes=out.axes(), dtype=str(self.dtype).split(".")[-1],
        )  # fmt: skip

    def _at_base(self, metric: Metric) -> KernelEstimate:
        """``θ_t = θ_0`` exactly, one metric: the diagnostics are exact (``R_lin = 0``,
        ``D_J = D_K = 0``, ``A_K = 1``, no error); no probe is evaluated."""
        zero = Estimate(0.0, 0.0)
        return KernelEstimate(
            r_lin=0.0, d_j=zero, d_k=zero, a_k=Estimate(1.0, 0.0), parameter_distance=0.0,
            output_change=0.0, probes=self.probes, seed=self.seed,
            distribution=self.distribution, metric=metric.name, base_metric=metric.name,
            approximation=metric.approximation, axes=self.outputs.axes(),
            dtype=str(self.dtype).split(".")[-1],
        )  # fmt: skip


def kernel_drift_estimate(
    outputs: StackedOutputs,
    theta0: Mapping[str, torch.Tensor],
    theta_t: Mapping[str, torch.Tensor],
    *,
    metric: Metric,
    probes: int = 8,
    seed: int = 0,
    distribution: str = "rademacher",
    base_metric: Metric | None = None,
) -> KernelEstimate:
    """The diagnostics of ``θ_t`` against ``θ_0`` in one call
    (``KernelProbes(outputs, theta0, …).estimate(theta_t, metric=…)``); for several
    checkpoints build one :class:`KernelProbes` and reuse it.

    Raises:
        ValueError: as :class:`KernelProbes` and :meth:`KernelProbes.estimate`.

    Source: seed 003 §0x09K (``kernel_drift_estimate``).
    """
    base = KernelProbes(outputs, theta0, probes=probes, seed=seed, distribution=distribution)
    return base.estimate(theta_t, metric=metric, base_metric=base_metric)


__all__ = ["DISTRIBUTIONS", "Estimate", "KernelEstimate", "KernelProbes", "kernel_drift_estimate",
           "kernel_matvec", "linearized_outputs"]  # fmt: skip

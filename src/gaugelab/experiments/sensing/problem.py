"""The batched matrix-sensing task the sensing experiments share: the protocol's fields,
every seed's instance stacked for one ensemble, and the mean over seeds their tables and figures
show (:func:`finite_mean`).

One rule trains one ensemble whose members are (seed × learning rate): factors
``U, V [S, L, n, k]`` (``member_dims = 2``), each seed with its own measurements.
Source: docs/protocols.md §3.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch
from pydantic import Field, field_validator, model_validator

from gaugelab.study.spec import ExperimentSpec
from gaugelab.tasks import MatrixSensing

SCHEDULES = ("reference", "constant", "cosine")
EQUIVARIANT_CLASS, COORDINATEWISE_CLASS = "equivariant", "coordinatewise"
"""The two classes of rules the zoo's split compares (by the zoo's orthogonal claim)."""
_DTYPES = {"float32": torch.float32, "float64": torch.float64}


class SensingExperiment(ExperimentSpec):
    """Fields every matrix-sensing experiment shares; defaults are docs/protocols.md §3.

    Subclasses set ``kind``, their step budget and their rules.
    """

    n: int = Field(40, ge=1, description="Matrix size n (X* is n × n). docs/protocols.md §3: 40.")
    rank: int = Field(3, ge=1, description="Planted rank r*. docs/protocols.md §3: 3.")
    k: int | None = Field(None, ge=1, description="Factor width k; None means k = n (§3).")
    m: int | None = Field(
        None, ge=1, description="Measurements; None means 2·r*(2n − r*) (462 for n=40, r*=3)."
    )
    init_scale: float = Field(
        1e-3, gt=0, description="Factor init scale: U, V = scale·randn(n, k), seed + 7 (§3)."
    )
    seeds: tuple[int, ...] = Field(
        (42, 123, 456), min_length=1, description="Instance seeds (factors use seed + 7)."
    )
    steps: int = Field(20_000, ge=1, description="Step budget per member (§3: 20,000).")
    interpolation_loss: float = Field(
        1e-7, gt=0, description="A member interpolates when its pre-update train loss is below."
    )
    check_every: int = Field(
        200, ge=1, description="Interpolation check (and curve record) interval in steps."
    )
    divergence_loss: float = Field(
        1e8, gt=0, description="A member diverges when its loss is non-finite or above this."
    )
    schedule: Literal["reference", "constant", "cosine"] = Field(
        "reference",
        description="reference: cosine decay for the decayed set only (§3); constant: no "
        "decay; cosine: η_s = η·½(1 + cos(π s/T)) at 1-based step s for every rule.",
    )
    tail: float = Field(
        0.0, ge=0, lt=1, description="Spectral-tail weight τ of the target (0: exactly low rank)."
    )
    dtype: Literal["float32", "float64"] = Field(
        "float32", description="Compute dtype (float32 as the reference runs)."
    )

    @field_validator("seeds")
    @classmethod
    def _distinct_seeds(cls, seeds: tuple[int, ...]) -> tuple[int, ...]:
        if len(set(seeds)) != len(seeds):
            raise ValueError(f"seeds={seeds}; allowed: distinct integers")
        return seeds

    @model_validator(mode="after")
    def _check_sizes(self) -> SensingExperiment:
        if self.rank > self.n:
            raise ValueError(f"rank={self.rank}; allowed: 1 <= rank <= n={self.n}")
        if self.tail > 0 and self.rank == self.n:
            raise ValueError(f"tail={self.tail} needs rank < n; got rank={self.rank}")
        return self

    @property
    def torch_dtype(self) -> torch.dtype:
        """The compute dtype as a ``torch.dtype``."""
        return _DTYPES[self.dtype]

    def measurement_count(self) -> int:
        """``m``, or its default ``2·r*(2n − r*)``."""
        return self.m if self.m is not None else 2 * self.rank * (2 * self.n - self.rank)

    def memory_estimate(self) -> int:
        """Bytes the measurement operators take at their peak, a lower bound on the run's
        memory: per seed ``A [m, n²]`` drawn in float32, cast to ``dtype``, transposed into a
        contiguous copy and stacked over the seeds (:class:`SensingBatch`) — three copies in
        ``dtype`` and one float32 draw."""
        itemsize = 8 if self.dtype == "float64" else 4
        size = self.measurement_count() * self.n * self.n
        return len(self.seeds) * size * 3 * itemsize + size * 4

    def decays(self, rule: str, decayed: Sequence[str] = ()) -> bool:
        """Whether ``rule`` runs on the cosine schedule under :attr:`schedule`."""
        return self.schedule == "cosine" or (self.schedule == "reference" and rule in decayed)


def finite_mean(xs: Sequence[float]) -> float | None:
    """The mean of the finite values of ``xs`` (e.g. one metric over seeds, a diverged seed's
    NaN left out); ``None`` when none is finite."""
    finite = [x for x in xs if math.isfinite(x)]
    return sum(finite) / len(finite) if finite else None


@dataclass(frozen=True, eq=False)
class SensingBatch:
    """The sensing instances of every seed, stacked.

    Attributes:
        seeds: ``[S]`` instance seeds.
        A: ``[S, m, n²]``; y: ``[S, m]``; target: ``[S, n, n]``; U0, V0: ``[S, n, k]``.
        AT: ``[S, n², m]``, ``A`` transposed and contiguous (the forward product with a few
            rows per seed runs about twice as fast against it on CPU).
    """

    seeds: tuple[int, ...]
    A: torch.Tensor
    y: torch.Tensor
    target: torch.Tensor
    U0: torch.Tensor
    V0: torch.Tensor
    AT: torch.Tensor | None = None

    def __post_init__(self) -> None:
        if self.AT is None:
            object.__setattr__(self, "AT", self.A.mT.contiguous())

    @classmethod
    def build(cls, spec: SensingExperiment) -> SensingBatch:
        """Draw every seed's instance and initial factors (docs/protocols.md §3 draw order)."""
        tasks = [
            MatrixSensing(
                n=spec.n,
                rank=spec.rank,
                k=spec.k,
                m=spec.m,
                init_scale=spec.init_scale,
                seed=s,
                tail=spec.tail,
                dtype=spec.torch_dtype,
            )
            for s in spec.seeds
        ]
        factors = [t.init_factors() for t in tasks]
        return cls(
            seeds=tuple(spec.seeds),
            A=torch.stack([t.A for t in tasks]),
            y=torch.stack([t.y for t in tasks]),
            target=torch.stack([t.target for t in tasks]),
            U0=torch.stack([u for u, _ in factors]),
            V0=torch.stack([v for _, v in factors]),
        )

    def loss(self, W: torch.Tensor) -> torch.Tensor:
        """Mean squared residual per member: ``W`` ``[S, L, n, n]`` → ``[S, L]``."""
        residual = W.flatten(-2) @ self.AT - self.y[:, None]  # [S, L, m]
        return (residual * residual).mean(dim=-1)

    def member_loss_and_grad(
        self, U: torch.Tensor, V: torch.Tensor, rows: torch.Tensor, width: int, *, grad: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """The loss and its gradients with respect to both factors, in closed form, for the
        members still in a compacted batch.

        With ``r = A vec(U Vᵀ) − y`` and ``L = mean(r²)``: ``∇_W L = (2/m) mat(Aᵀ r)``,
        ``∇_U L = ∇_W L · V``, ``∇_V L = (∇_W L)ᵀ U`` — what autograd computes, without its
        per-step overhead, and with both products against ``A`` in their fast layout.

        The members of the full batch are the flat rows ``e = seed·width + j`` of the
        ``[S, width]`` grid (seed-major); ``rows`` names the ones present. The two products
        against the measurements run per seed that has a member present, always on the seed's
        full ``width`` rows (absent members' rows are zeros and their results are dropped):
        a product's row does not depend on the other rows' values, but a BLAS may round it
        differently for another number of rows (a single row takes a matrix–vector kernel), so
        a present member's numbers are those of the uncompacted batch bit for bit, and a seed
        with no member present costs nothing.

        Args:
            U, V: ``[E', n, k]`` the present members, in the order of ``rows``.
            rows: ``[E']`` int64, increasing flat indices into ``[S·width]``.
            width: members per seed in the full batch (the rate grid's size).
            grad: also return the gradients (else ``None, None``).

        Returns:
            ``(loss [E'], grad_U [E', n, k], grad_V [E', n, k])``.
        """
        S, size = len(self.seeds), rows.numel()
        W = U @ V.mT  # [E', n, n]
        n2, m = W.shape[-2] * W.shape[-1], self.y.shape[-1]
        full = size == S * width
        if full:
            grid = W.view(S, width, n2)
            seeds: list[int] = list(range(S))
        else:
            grid = W.new_zeros(S * width, n2)
            grid[rows] = W.flatten(-2)
            grid = grid.view(S, width, n2)
            seeds = torch.unique(rows // width).tolist()
        residual = W.new_zeros(S, width, m)
        for s in seeds:
            residual[s] = grid[s] @ self.AT[s] - self.y[s]
        loss = (residual * residual).mean(dim=-1).view(-1)
        if not full:
            loss = loss[rows]
        if not grad:
            return loss, None, None
        grad_grid = W.new_zeros(S, width, n2)
        for s in seeds:
            grad_grid[s] = (residual[s] @ self.A[s]) * (2.0 / m)
        grad_W = grad_grid.view(S * width, n2)
        if not full:
            grad_W = grad_W[rows]
        grad_W = grad_W.view_as(W)
        return loss, grad_W @ V, grad_W.mT @ U

    def recovery_error(self, W: torch.Tensor) -> torch.Tensor:
        """``‖W − target‖_F / ‖target‖_F`` per member: ``[S, L, n, n]`` → ``[S, L]``."""
        target = self.target[:, None]
        return torch.linalg.matrix_norm(W - target) / torch.linalg.matrix_norm(target)

"""Static composition of low-rank updates: concatenated factors, rank ledger, interference.

A static composition ``ΔW = Σ_j λ_j s_j B_j A_j`` is exactly the product of concatenated
factors ``B_cat = [B_1 … B_J]`` and ``A_cat = [λ_1 s_1 A_1; …; λ_J s_J A_J]`` (seed 003 §0x05B),
so its rank is at most ``min(rank B_cat, rank A_cat, Σ r_j)`` — output-space reuse, input-space
reuse, the widths — and coefficients can cancel further: the rank is measured after composing
(§0x05C). Each source keeps its own scale ``s_j`` (from its ``(α, r_j, rsLoRA)``): composing
never re-derives a scale from the composed width.

* :func:`compose_static` — the composition, its rank ledger and the check that the factor
  product equals the sum (§0x05G);
* :func:`compress` — the best rank-``k`` approximation of a composition (SVD in factor space)
  with its residual;
* :func:`interference` — novelty (row and column overlap) apart from interference (the
  Frobenius cross term ``2⟨ΔW_1, ΔW_2⟩`` and, given activations, the sampled-output cross term),
  §0x05D;
* :func:`static_merge_exists` — whether a gated operator ``Σ g_j(x) ΔW_j x`` equals one matrix on
  a finite input set (§0x05F: in general it does not);
* :func:`staged_expansion_report` — merge stage by stage: per-stage rank, total rank, bases and
  task metrics (§0x05G);
* :func:`~gaugelab.lowrank.composition.adapters.compose_adapters` — all of it for PEFT
  adapters, written as a PEFT adapter.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch

from gaugelab.lowrank.composition.interference import Interference, interference
from gaugelab.lowrank.spectra.factored import as_update, factor_triangles, work_dtype
from gaugelab.lowrank.spectra.ranks import numerical_rank
from gaugelab.lowrank.spectra.reconstruction import reconstruct_by_rank
from gaugelab.lowrank.spectra.spectrum import spectrum
from gaugelab.lowrank.subspaces.compare import UpdateBases, update_bases

__all__ = [
    "Compressed",
    "Interference",
    "StageRow",
    "StaticComposition",
    "StaticMergeCheck",
    "compose_static",
    "compress",
    "interference",
    "staged_expansion_report",
    "static_merge_exists",
]


@dataclass(frozen=True)
class StaticComposition:
    """``Σ_j λ_j s_j B_j A_j = B_cat A_cat`` with its rank ledger (seed 003 §0x05A–§0x05C).

    Attributes:
        B: ``[m, R]`` ``B_cat``, the up factors side by side (``R = Σ r_j``).
        A: ``[R, n]`` ``A_cat``, the down factors stacked, each times ``λ_j s_j``.
        coefficients: ``λ_j``; scales: ``s_j``; ranks: ``r_j`` (factor widths), in order.
        rank_b_cat, rank_a_cat: numerical ranks of ``B_cat`` and ``A_cat``.
        rank_bound: ``min(rank B_cat, rank A_cat, Σ r_j)``.
        measured_rank: numerical rank of ``B_cat A_cat`` (factor space), ``≤ rank_bound``.
        max_abs_difference: ``max |B_cat A_cat − Σ λ_j s_j B_j A_j|`` (the two construction paths
            of §0x05G), or ``None`` when not checked.
        rtol: the relative tolerance of the factor ranks (and of the product's when it was
            given; by default the product's is its factored round-off, see
            :func:`compose_static`).
    """

    B: torch.Tensor
    A: torch.Tensor
    coefficients: tuple[float, ...]
    scales: tuple[float, ...]
    ranks: tuple[int, ...]
    rank_b_cat: int
    rank_a_cat: int
    rank_bound: int
    measured_rank: int
    max_abs_difference: float | None
    rtol: float

    def delta(self) -> torch.Tensor:
        """The dense composed update ``B_cat A_cat`` ``[m, n]``."""
        return self.B @ self.A


def _real(value: object, func: str, arg: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{func}: {arg}={value!r}; allowed: a finite real number")
    if not torch.isfinite(torch.tensor(float(value))):
        raise ValueError(f"{func}: {arg}={value!r}; allowed: a finite real number")
    return float(value)


def _matrix_rank(X: torch.Tensor, rtol: float) -> int:
    return int(numerical_rank(X, matrix_id="factor", rtol=rtol).value)  # type: ignore[union-attr]


def compose_static(
    updates: Sequence[object],
    coefficients: Sequence[float] | None = None,
    *,
    rtol: float | None = None,
    check: bool = True,
) -> StaticComposition:
    """Compose factored updates by concatenation — exact — and measure the rank ledger.

    Args:
        updates: ``J ≥ 1`` factor tuples ``(B_j, A_j)`` or ``(B_j, A_j, s_j)`` with
            ``B_j [m, r_j]``, ``A_j [r_j, n]`` of one ``m``, ``n`` and dtype (not batched).
        coefficients: ``λ_j``, finite reals (default all 1).
        rtol: relative tolerance of the numerical ranks. Default: for ``B_cat`` and
            ``A_cat``, ``max(m, n, R)·eps`` of the dtype the decomposition runs in (the
            factors' own; float32 for float16 / bfloat16, which LAPACK lacks: the stored
            factors are exact, their storage dtype adds no noise); for the product, the
            factored SVD's round-off ``max(m, n)·eps·‖B_cat‖₂‖A_cat‖₂``
            (:func:`gaugelab.lowrank.numerical_rank`), so a composition that cancels
            (``X − X``) measures rank 0. The measured rank is at most the bound either way
            (``rank(B A) ≤ min(rank B, rank A)``; a count above it is round-off).
        check: also form ``Σ λ_j s_j B_j A_j`` densely and record the largest difference from
            ``B_cat A_cat`` (the seed's ``assert_close`` of the two paths; ``O(m n R)``).

    Returns:
        :class:`StaticComposition`.

    Raises:
        TypeError, ValueError: no update, a dense one, mismatched shapes or dtypes, a batch,
            as many coefficients as updates not given, a non-finite coefficient.

    Source:
        seed 003 §0x05A (the object), §0x05B (``B_cat``, ``A_cat``, the bound), §0x05C (the
        ledger), §0x05G (``compose_static``).
    """
    func = "compose_static"
    if not updates:
        raise ValueError(f"{func}: updates is empty; allowed: at least one (B, A[, s])")
    parsed = [as_update(u, func, f"updates[{j}]") for j, u in enumerate(updates)]
    for j, u in enumerate(parsed):
        if u.B is None or u.batch or isinstance(u.scale, torch.Tensor):
            raise ValueError(
                f"{func}: updates[{j}] must be factors (B [m, r], A [r, n][, s]) of one "
                "matrix with a number as scale"
            )
        if u.shape != parsed[0].shape or u.dtype != parsed[0].dtype:
            raise ValueError(
                f"{func}: updates[{j}] is {u.shape[0]}×{u.shape[1]} {u.dtype}; updates[0] is "
                f"{parsed[0].shape[0]}×{parsed[0].shape[1]} {parsed[0].dtype}; allowed: one"
            )
    if coefficients is None:
        coefficients = [1.0] * len(parsed)
    if len(coefficients) != len(parsed):
        raise ValueError(
            f"{func}: {len(coefficients)} coefficients for {len(parsed)} updates; allowed: one each"
        )
    lam = tuple(_real(c, func, f"coefficients[{j}]") for j, c in enumerate(coefficients))
    scales = tuple(float(u.scale) for u in parsed)  # type: ignore[arg-type]
    B_cat = torch.cat([u.B for u in parsed], dim=1)  # type: ignore[misc]  # [m, R]
    A_cat = torch.cat([c * s * u.A for c, s, u in zip(lam, scales, parsed, strict=True)])  # [R, n]
    m, n = parsed[0].shape
    R = B_cat.shape[1]
    given = rtol
    if rtol is None:  # the computation's dtype: LAPACK runs half precision in float32
        rtol = max(m, n, R) * torch.finfo(work_dtype(B_cat.dtype)).eps
    pair = (B_cat, A_cat)
    triangles = factor_triangles(as_update(pair, func))  # R_B, R_A: all three spectra
    rank_b, rank_a = _matrix_rank(triangles[0], rtol), _matrix_rank(triangles[1], rtol)
    bound = min(rank_b, rank_a, R)
    product = numerical_rank(spectrum(pair, matrix_id="composition", triangles=triangles),
                             rtol=given)  # fmt: skip
    measured = min(int(product.value), bound)  # type: ignore[union-attr]  # rank(BA) ≤ both
    diff = None
    if check:
        direct = sum(c * s * (u.B @ u.A) for c, s, u in zip(lam, scales, parsed, strict=True))
        diff = float((B_cat @ A_cat - direct).abs().max())
    return StaticComposition(
        B=B_cat, A=A_cat, coefficients=lam, scales=scales,
        ranks=tuple(u.B.shape[1] for u in parsed),  # type: ignore[union-attr]
        rank_b_cat=rank_b, rank_a_cat=rank_a, rank_bound=bound,
        measured_rank=measured, max_abs_difference=diff, rtol=rtol,
    )  # fmt: skip


@dataclass(frozen=True)
class Compressed:
    """A composition compressed to rank ``k`` by its truncated SVD (factor space).

    Attributes:
        rank: ``k``; B: ``[m, k]``; A: ``[k, n]`` (balanced: ``U_k Σ_k^{1/2}``, ``Σ_k^{1/2} V_kᵀ``).
        residual_squared: ``‖ΔW − B A‖_F² = Σ_{i>k} σ_i²`` (Eckart–Young).
        relative_residual: ``residual_squared / ‖ΔW‖_F²`` (0.0 for the zero matrix).
        spectral: ``σ_{k+1}``; retained_energy: ``Σ_{i≤k} σ_i² / Σ σ_i²``.
    """

    rank: int
    B: torch.Tensor
    A: torch.Tensor
    residual_squared: float
    relative_residual: float
    spectral: float
    retained_energy: float


def compress(composition: StaticComposition, rank: int) -> Compressed:
    """The best rank-``k`` approximation of a composition, without forming ``B_cat A_cat``.

    Args:
        composition: from :func:`compose_static`.
        rank: ``k ≥ 1``.

    Returns:
        :class:`Compressed`.

    Raises:
        ValueError: ``rank`` not an int ``≥ 1``.

    Source:
        seed 003 §0x05E (post-hoc SVD compression), §0x05H (its failure boundary: the
        residual can erase task-specific directions); §0x04B (Eckart–Young).
    """
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise ValueError(f"compress: rank={rank!r}; allowed: an int >= 1")
    sweep = reconstruct_by_rank((composition.B, composition.A), [rank], balance="balanced")
    row = sweep.rows[0]
    energy = float((sweep.sigma**2).sum())
    return Compressed(
        rank=rank, B=row.B, A=row.A, residual_squared=row.frobenius_squared,
        relative_residual=row.frobenius_squared / energy if energy > 0 else 0.0,
        spectral=row.spectral, retained_energy=row.retained_energy,
    )  # fmt: skip


@dataclass(frozen=True)
class StaticMergeCheck:
    """Whether one matrix ``M`` reproduces a gated operator on every given input.

    Attributes:
        exists: ``residual ≤ atol + rtol·‖Y‖_F``.
        merged: ``[m, n]``, the least-squares ``M = Y X⁺`` (the best single matrix).
        residual: ``‖Y − M X‖_F``; outputs_norm: ``‖Y‖_F``, ``Y`` the gated outputs.
    """

    exists: bool
    merged: torch.Tensor
    residual: float
    outputs_norm: float


def static_merge_exists(
    gates: Sequence[Callable[[torch.Tensor], float | torch.Tensor]],
    deltas: Sequence[torch.Tensor],
    inputs: torch.Tensor,
    *,
    rtol: float = 1e-10,
    atol: float = 0.0,
) -> StaticMergeCheck:
    """Test whether ``x ↦ Σ_j g_j(x) ΔW_j x`` equals one linear map on a finite input set.

    Args:
        gates: ``J`` callables, ``g_j(x [n]) → scalar``.
        deltas: ``J`` dense ``[m, n]`` updates.
        inputs: ``[N, n]``, one input per row.
        rtol, atol: the tolerance of ``exists``.

    Returns:
        :class:`StaticMergeCheck`. With ``g(x) = x_1``, ``ΔW = f_1 e_1ᵀ`` and inputs ``e_1``,
        ``2e_1`` the outputs are ``f_1`` and ``4 f_1``; a linear map sends ``2e_1`` to twice
        the image of ``e_1``, so no matrix exists (§0x05F).

    Raises:
        ValueError: different numbers of gates and deltas, mismatched shapes.

    Source:
        seed 003 §0x05F.
    """
    func = "static_merge_exists"
    if len(gates) != len(deltas) or not deltas:
        raise ValueError(f"{func}: {len(gates)} gates for {len(deltas)} deltas; allowed: one each")
    X = inputs
    if X.ndim != 2 or any(D.ndim != 2 or D.shape[1] != X.shape[1] for D in deltas):
        raise ValueError(f"{func}: inputs must be [N, n] and every delta [m, n] of that n")
    Y = torch.stack(
        [sum(torch.as_tensor(g(x), dtype=X.dtype) * (D @ x) for g, D in zip(gates, deltas,
                                                                            strict=True))
         for x in X]
    )  # fmt: skip  # [N, m]
    # X Mᵀ ≈ Y in minimum norm, by the SVD-based pseudo-inverse: the inputs are often rank
    # deficient (e₁ and 2e₁), where lstsq's default driver depends on the LAPACK build
    M = (torch.linalg.pinv(X) @ Y).mT  # [m, n]
    residual = float(torch.linalg.norm(Y - X @ M.mT))
    norm = float(torch.linalg.norm(Y))
    return StaticMergeCheck(residual <= atol + rtol * norm, M, residual, norm)


@dataclass(frozen=True)
class StageRow:
    """One stage of a merge-and-reinitialise expansion.

    Attributes:
        stage: the index ``t``; rank_stage: numerical rank of stage ``t``'s update;
        rank_total: numerical rank of the running sum after stage ``t``;
        bases: :class:`~gaugelab.lowrank.subspaces.compare.UpdateBases` of the running sum (row and
            column bases);
        new_row, new_column: dimensions the stage added to the span of the concatenated down
            factors (``rank A_cat``) / up factors (``rank B_cat``) — the novelty; the total's
            rank can grow by less (cancellation);
        metrics: what ``evaluate`` returned for the running sum (empty without it).
    """

    stage: int
    rank_stage: int
    rank_total: int
    bases: UpdateBases | None
    new_row: int
    new_column: int
    metrics: Mapping[str, float]


def staged_expansion_report(
    stages: Sequence[object],
    coefficients: Sequence[float] | None = None,
    *,
    rtol: float | None = None,
    evaluate: Callable[[torch.Tensor, torch.Tensor], Mapping[str, float]] | None = None,
    with_bases: bool = True,
) -> list[StageRow]:
    """Merge updates stage by stage and report the rank and bases after each (§0x05G).

    The running sum is kept as concatenated factors (exact), so the bases are the update's,
    not the current factors' (factor gauge can change without changing the update).

    Args:
        stages: factor tuples ``(B_t, A_t[, s_t])`` in merge order.
        coefficients: ``λ_t`` (default 1).
        rtol: numerical-rank tolerance (default as :func:`compose_static`).
        evaluate: optional ``evaluate(B_total, A_total) → {metric: value}`` (task metrics of
            the merged model, e.g. target and retention loss).
        with_bases: compute each stage's row and column bases (``False``: ``bases`` is
            ``None``, for a caller that reads only the ranks; the bases cost an SVD a stage).

    Returns:
        One :class:`StageRow` per stage.

    Raises:
        As :func:`compose_static`.

    Source:
        seed 003 §0x05E (merge and reinitialise), §0x05G (the staged report).
    """
    rows: list[StageRow] = []
    coefficients = list(coefficients) if coefficients is not None else [1.0] * len(stages)
    prev_row = prev_col = 0
    for t in range(len(stages)):
        total = compose_static(stages[: t + 1], coefficients[: t + 1], rtol=rtol, check=False)
        stage = total if t == 0 else compose_static([stages[t]], [coefficients[t]],
                                                    rtol=total.rtol, check=False)  # fmt: skip
        bases = (update_bases((total.B, total.A), policy="numerical", rtol=total.rtol,
                              factor_spans=False) if with_bases else None)  # fmt: skip
        rank = total.measured_rank
        metrics = dict(evaluate(total.B, total.A)) if evaluate is not None else {}
        rows.append(StageRow(t, stage.measured_rank, rank, bases, total.rank_a_cat - prev_row,
                             total.rank_b_cat - prev_col, metrics))  # fmt: skip
        prev_row, prev_col = total.rank_a_cat, total.rank_b_cat
    return rows

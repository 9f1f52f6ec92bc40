"""Expressivity ledgers: what rank is enough for, with the quantifiers carried along.

"Rank r is enough" is incomplete (seed 003 §0x0A): enough to represent one matrix gap, to
build a deep-network adapter that exists, to remove spurious second-order stationary points
of a perturbed linearized loss, or to compress one gradient-descent trajectory? Each function
here is one small exact ledger of one such theorem; its docstring states the theorem's
**scope** and what it **does not prove**, and :data:`CLAIMS` records the six coordinates of
§0x0AA (object, quantifier, architecture, optimization, rank statement, exclusion).

Matrix arguments are exact :class:`~gaugelab.linalg.rational.Matrix` (exact results) or 2-D
floating tensors (float64 SVD with numpy's rank tolerance).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

import torch

from gaugelab.linalg.operands import Operand, mode
from gaugelab.linalg.rational import Matrix
from gaugelab.lowrank.expressivity.claims import CLAIMS, TheoremClaim
from gaugelab.lowrank.expressivity.deep import (
    DeepLoraParameters,
    _chain_product,
    complement_recurrence,
    compression_error_bound,
    compression_residual,
    deep_lora_parameters,
)
from gaugelab.lowrank.geometry.factor_map import svd_rank

__all__ = [
    "CLAIMS",
    "DeepLoraParameters",
    "Matrix",
    "TheoremClaim",
    "complement_recurrence",
    "compression_error_bound",
    "compression_residual",
    "deep_lora_parameters",
    "exact_adapter_rank",
    "first_omitted_singular_value",
    "generic_uniform_rank",
    "ntk_existence_rank",
    "ntk_landscape_rank",
    "padded_factorization",
    "partition_covers",
    "product_gap",
    "telescoping_terms",
    "transformer_rank_threshold",
    "truncation_residuals",
    "uniform_partition_rank",
]


def _int(where: str, name: str, v: object, low: int = 0) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < low:
        raise ValueError(f"{where}: {name}={v!r}; allowed: an integer >= {low}")
    return v


def _rank(E: Operand) -> int:
    return E.rank() if isinstance(E, Matrix) else svd_rank(E)[0]


def exact_adapter_rank(E: Operand) -> int:
    """The smallest configured rank whose adapter can equal one known gap:
    ``min{r : ∃ B, A, B A = E} = rank(E)``.

    Args:
        E: ``[m, n]`` gap ``W* − W0`` (exact, or float with numpy's rank tolerance).

    Returns:
        ``rank(E)``.

    Scope: one frozen matrix and one known target; necessity (``rank(BA) ≤ r``) and
    sufficiency (:func:`padded_factorization`). Does not prove: that factor training finds
    the factors, or that a small weight residual preserves task behaviour.

    Source: seed 003 §0x0AB (``E = diag(4, 2, 0)``: rank 2).
    """
    mode("exact_adapter_rank", E=E)
    return _rank(E)


def padded_factorization(E: Operand, r: int) -> tuple[Operand, Operand]:
    """A rank-``r`` factorization ``B A = E`` for any ``r ≥ rank(E)``, zero-padded.

    Exact operands: the rank factorization ``E = C R`` (``C`` the pivot columns of ``E``,
    ``R`` the nonzero rows of its reduced row-echelon form), padded with zero columns / rows.
    Tensors: the seed's ``B = [U_q Σ_q^{1/2}, 0]``, ``A = [Σ_q^{1/2} V_qᵀ; 0]``.

    Args:
        E: ``[m, n]``; r: the configured rank, ``≥ rank(E)``.

    Returns:
        ``(B [m, r], A [r, n])``.

    Raises:
        ValueError: ``r < rank(E)`` (no rank-``r`` adapter can equal ``E``).

    Scope: existence, by construction, for one known gap. Does not prove: that this (or any
    ``GL(r)`` gauge of it) is the factorization an optimizer reaches.

    Source: seed 003 §0x0AB (``B = [[4,0],[0,2],[0,0]]``, ``A = [[1,0,0],[0,1,0]]``).
    """
    exact = mode("padded_factorization", E=E)
    q = _rank(E)
    _int("padded_factorization", "r", r)
    if r < q:
        raise ValueError(f"padded_factorization: r={r} < rank(E)={q}; allowed: r >= rank(E)")
    m, n = tuple(E.shape)
    if exact:
        reduced, pivots = E.rref()
        C = [[E[i, j] for j in pivots] + [0] * (r - q) for i in range(m)]
        R = [list(reduced.rows()[k]) for k in range(q)] + [[0] * n for _ in range(r - q)]
        return Matrix(C), Matrix(R)
    U, S, Vh = torch.linalg.svd(E, full_matrices=False)
    root = S[:q].sqrt()
    B = torch.zeros(m, r, dtype=E.dtype)
    A = torch.zeros(r, n, dtype=E.dtype)
    B[:, :q], A[:q] = U[:, :q] * root, root[:, None] * Vh[:q]
    return B, A


def _squared_singular_values(E: Operand) -> list:
    """The ``min(m, n)`` squared singular values of ``E``, descending."""
    if isinstance(E, Matrix):
        q = min(E.shape)
        for X in (E, E.T):  # exact when the columns (or rows) are mutually orthogonal
            gram = X.T @ X  # [k, k]; when diagonal, its diagonal is σ² then k − q zeros
            k = gram.shape[0]
            if all(gram[i, j] == 0 for i in range(k) for j in range(k) if i != j):
                return sorted((gram[i, i] for i in range(k)), reverse=True)[:q]
        raise ValueError(
            "E's singular values are not exact rationals here (neither its columns nor its rows "
            "are orthogonal); allowed: pass a float64 tensor for an SVD"
        )
    return [float(s) ** 2 for s in torch.linalg.svdvals(E)]


def truncation_residuals(E: Operand) -> list:
    """The best squared Frobenius residual ``min_{rank X ≤ r} ‖E − X‖_F² = Σ_{j>r} σ_j²`` for
    every ``r = 0 … min(m, n)`` (Eckart–Young).

    Args:
        E: ``[m, n]``; exact when its columns or rows are orthogonal, else a float tensor.

    Returns:
        ``[min(m, n) + 1]`` residuals (Fractions or floats), ending at 0.

    Raises:
        ValueError: an exact ``E`` whose singular values are not computable exactly here.

    Scope: optimal post-hoc approximation of one matrix. Does not prove: that factor training
    finds the truncation, or that a small residual preserves task behaviour.

    Source: seed 003 §0x0AB (3×3: 20, 4, 0), §0x0BM (4×6 ``diag(4, 3, 2, 1)``: 30, 14, 5, 1,
    0); eckart1936approximation.
    """
    mode("truncation_residuals", E=E)
    s2 = _squared_singular_values(E)
    return [sum(s2[r:], Fraction(0) if isinstance(E, Matrix) else 0.0) for r in range(len(s2) + 1)]


def _layers(where: str, Ws: Sequence[Operand], dWs: Sequence[Operand]) -> bool:
    if len(Ws) != len(dWs) or not Ws:
        raise ValueError(f"{where}: {len(Ws)} layers and {len(dWs)} updates; allowed: equal, >= 1")
    exact = mode(
        where,
        **{f"Ws[{i}]": W for i, W in enumerate(Ws)},
        **{f"dWs[{i}]": d for i, d in enumerate(dWs)},
    )
    for i, (W, d) in enumerate(zip(Ws, dWs, strict=True)):
        if tuple(W.shape) != tuple(d.shape):
            raise ValueError(
                f"{where}: Ws[{i}] {tuple(W.shape)} vs dWs[{i}] {tuple(d.shape)}; "
                "allowed: equal shapes"
            )
    return exact


def product_gap(Ws: Sequence[Operand], dWs: Sequence[Operand]) -> Operand:
    """``F_Δ − F_0 = (W_L + ΔW_L)⋯(W_1 + ΔW_1) − W_L⋯W_1`` for layers in application order
    ``Ws = [W_1, …, W_L]`` (square, equal sizes).

    Scope: an identity for linear products. Does not prove: anything about allocation; see
    :func:`telescoping_terms`. Source: seed 003 §0x0AC.
    """
    exact = _layers("product_gap", Ws, dWs)
    d, dtype = tuple(Ws[0].shape)[1], None if exact else Ws[0].dtype
    adapted = [W + dW for W, dW in zip(Ws, dWs, strict=True)]
    return _chain_product(adapted, d, exact, dtype) - _chain_product(Ws, d, exact, dtype)


def telescoping_terms(Ws: Sequence[Operand], dWs: Sequence[Operand]) -> list[Operand]:
    """The telescoping summands ``(Π_{i>ℓ} W_i) ΔW_ℓ (Π_{i<ℓ} (W_i + ΔW_i))``, ``ℓ = 1 … L``;
    they sum to :func:`product_gap`, and each has rank ``≤ rank(ΔW_ℓ)``.

    Args:
        Ws: frozen layers ``[W_1, …, W_L]`` in application order (``F = W_L⋯W_1``), ``[d, d]``.
        dWs: their updates, same shapes.

    Returns:
        ``L`` matrices ``[d, d]``.

    Scope: an identity for linear products; it gives the necessary budget
    ``rank(F_Δ − F_0) ≤ Σ_ℓ rank(ΔW_ℓ) ≤ L R``. Does not prove: that every gap of rank
    ``≤ L R`` can be allocated to valid layer updates (Zeng and Lee's product lemma needs
    invertible context products), nor that rank is additive.

    Source: seed 003 §0x0AC (the distributed allocation: ``diag(1,0,0)`` and ``diag(0,2,0)``).
    """
    exact = _layers("telescoping_terms", Ws, dWs)
    d, dtype = tuple(Ws[0].shape)[1], None if exact else Ws[0].dtype
    adapted = [W + dW for W, dW in zip(Ws, dWs, strict=True)]
    L = len(Ws)
    return [
        _chain_product(Ws[l + 1 :], d, exact, dtype)
        @ dWs[l]
        @ _chain_product(adapted[:l], d, exact, dtype)
        for l in range(L)  # noqa: E741 - the seed's ℓ
    ]


def uniform_partition_rank(gap_ranks: Sequence[int], L_frozen: int, L_target: int) -> int:
    """The uniform-partition sufficient rank ``R = ⌈max_i rank(E_i) / M⌉``,
    ``M = ⌊L_frozen / L_target⌋`` adapted layers per target layer.

    Args:
        gap_ranks: ``rank(E_i)`` of each partition block's gap (``L_target`` of them).
        L_frozen, L_target: depths, ``L_frozen ≥ L_target ≥ 1``.

    Raises:
        ValueError: depths out of range, or ``len(gap_ranks) != L_target``.

    Scope: existence for a ReLU FNN of width D under the paper's Assumption 1, bounded inputs
    and **updated biases** (they linearize intermediate ReLUs). Does not prove: necessity,
    trainability, or anything for a bias-frozen LoRA implementation.

    Source: seed 003 §0x0AE; zeng2024expressive.
    """
    _int("uniform_partition_rank", "L_target", L_target, 1)
    _int("uniform_partition_rank", "L_frozen", L_frozen, L_target)
    if len(gap_ranks) != L_target:
        raise ValueError(
            f"uniform_partition_rank: {len(gap_ranks)} gap ranks; allowed: L_target={L_target}"
        )
    M = L_frozen // L_target
    return -(-max(_int("uniform_partition_rank", "gap rank", g) for g in gap_ranks) // M)


def generic_uniform_rank(D: int, M: int) -> int:
    """The generic sufficient rank ``⌈D / M⌉`` for independently drawn continuous random
    weights of width ``D`` and ``M`` adapted layers per block.

    Scope: with probability one under that random-matrix model only. Does not prove: a
    frequency claim about pretrained checkpoints; ``D/M`` is not a recommended sweep endpoint.

    Source: seed 003 §0x0AE; zeng2024expressive.
    """
    return -(-_int("generic_uniform_rank", "D", D, 1) // _int("generic_uniform_rank", "M", M, 1))


def partition_covers(
    layer_ranks: Sequence[int], partition: Sequence[Sequence[int]], gap_ranks: Sequence[int]
) -> bool:
    """The nonuniform coverage condition ``Σ_{ℓ∈P_i} R_ℓ ≥ rank(E_i)`` for every block.

    Args:
        layer_ranks: ``R_ℓ`` of each frozen layer (0-based index ``ℓ``).
        partition: ordered blocks of consecutive layer indices covering every layer once,
            e.g. ``((0, 1), (2,))``.
        gap_ranks: ``rank(E_i)`` per block.

    Raises:
        ValueError: a partition that is not ordered, consecutive and covering; mismatched
            lengths.

    Scope: existence under Assumption 1 with updated biases. Does not prove: that only the
    rank sum matters during training — location, conditioning, activation patterns and
    optimizer state can make equal-budget allocations behave differently.

    Source: seed 003 §0x0AF; zeng2024expressive.
    """
    flat = [i for block in partition for i in block]
    if flat != list(range(len(layer_ranks))) or any(not block for block in partition):
        raise ValueError(
            f"partition_covers: partition={partition!r}; allowed: ordered non-empty blocks of "
            f"consecutive indices covering 0..{len(layer_ranks) - 1} once"
        )
    if len(gap_ranks) != len(partition):
        raise ValueError(
            f"partition_covers: {len(gap_ranks)} gap ranks for {len(partition)} blocks"
        )
    return all(
        sum(layer_ranks[i] for i in block) >= g
        for block, g in zip(partition, gap_ranks, strict=True)
    )


def first_omitted_singular_value(E: Operand, budget: int) -> Fraction | float:
    """``ε_i = σ_{budget+1}(E_i)``: the first singular value a partition block's rank budget
    ``Σ_{ℓ∈P_i} R_ℓ`` cannot cover (0 when the budget covers ``rank(E_i)``).

    Args:
        E: ``[m, n]`` block gap; budget: an integer ``≥ 0``.

    Returns:
        A Fraction (exact operands with orthogonal columns or rows, whose singular values are
        rational) or a float.

    Scope: one local term of Zeng and Lee's propagated bound. Does not prove: a small final
    function error — later layers amplify it and input covariance and weight magnitudes
    enter — nor reachability or held-out quality.

    Source: seed 003 §0x0AG; zeng2024expressive.
    """
    mode("first_omitted_singular_value", E=E)
    _int("first_omitted_singular_value", "budget", budget)
    s2 = _squared_singular_values(E)
    if budget >= len(s2):
        return Fraction(0) if isinstance(E, Matrix) else 0.0
    v = s2[budget]
    if isinstance(v, Fraction):
        num, den = math.isqrt(v.numerator), math.isqrt(v.denominator)
        if num * num == v.numerator and den * den == v.denominator:
            return Fraction(num, den)
        return float(v) ** 0.5
    return v**0.5


def transformer_rank_threshold(gap_ranks: Sequence[int]) -> int:
    """The Transformer sufficient rank ``R = max_{i ∈ [L+1]} ⌈G_i / 2⌉`` (the ``/2``: a score
    product ``(W_K + ΔW_K)ᵀ(W_Q + ΔW_Q) − W_Kᵀ W_Q`` has rank ``≤ 2R``).

    Args:
        gap_ranks: the block gap ranks ``G_1 … G_L`` and the output gap ``G_{L+1}``.

    Scope: the paper's same-size, ``D×D``, **no-residual** Transformer, adapters on K/Q/V/O,
    the last FFN matrix and the output matrix, biases updated, under Assumption 4 (``D/2``
    for random weights with probability one). Does not prove: that ``D/2`` is necessary for
    pretrained residual LLMs, the best benchmark rank, found by gradient training, or that
    smaller ranks cannot solve structured downstream tasks.

    Source: seed 003 §0x0AH; zeng2024expressive.
    """
    if not gap_ranks:
        raise ValueError("transformer_rank_threshold: gap_ranks is empty; allowed: L+1 >= 1 ranks")
    return max(-(-_int("transformer_rank_threshold", "G_i", g) // 2) for g in gap_ranks)


def ntk_existence_rank(K: int, N: int) -> int:
    """The largest ``s`` with ``s(s+1)/2 ≤ K N``: some global minimizer of the
    nuclear-norm-regularized linearized loss has rank ``≤ s`` (if a minimizer exists).

    Scope: the linearized full-update problem (PSD lift, dimension count), ``N`` examples,
    ``K`` outputs. Does not prove: that every minimizer is low rank, that the nonlinear full
    fine-tuning update has that rank, or that a rank-``s`` factor optimizer reaches it.

    Source: seed 003 §0x0AL, §0x0AM (``KN = 6`` → 3); jang2024lora.
    """
    kn = _int("ntk_existence_rank", "K", K, 1) * _int("ntk_existence_rank", "N", N, 1)
    s = (math.isqrt(8 * kn + 1) - 1) // 2
    return s


def ntk_landscape_rank(K: int, N: int) -> int:
    """The smallest configured width ``r`` with ``r(r+1)/2 > K N`` (strict): for almost every
    nonzero PSD perturbation ``P``, every second-order stationary point of the perturbed
    factorized linearized loss is global.

    Scope: the **perturbed** objective ``L̂(u vᵀ) + λ/2(‖u‖² + ‖v‖²) + ⟨P, Q Qᵀ⟩``, SOSPs,
    linearized loss. Does not prove: anything for the deterministic ``P = 0``, for first-order
    stationary points or stopped checkpoints, for the nonlinear network, or a ``√N`` rule.

    Source: seed 003 §0x0AM (``KN = 6`` → 4), §0x0AO (``KN = 64`` → 11); jang2024lora.
    """
    kn = _int("ntk_landscape_rank", "K", K, 1) * _int("ntk_landscape_rank", "N", N, 1)
    return ntk_existence_rank(1, kn) + 1

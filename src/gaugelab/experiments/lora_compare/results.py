"""What :func:`~gaugelab.experiments.lora_compare.run.compare_lora` finds: per module, the row
and column subspace comparison of two updates, and the whole comparison.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gaugelab.lowrank.subspaces.compare import HaarNull

__all__ = ["SIDES", "CompareResult", "ModuleComparison"]

SIDES = ("row", "column")


@dataclass
class ModuleComparison:
    """One module's two updates compared.

    Attributes:
        module, layer, family: the path, block index (or ``None``), ``attention``/``mlp``.
        shape: ``(d_out, d_in)``; configured_a, configured_b: LoRA ranks (``None``: dense).
        rank_a, rank_b: the ranks retained by the policy (the compared spans' dimensions).
        policy_a, policy_b: the policy ids that chose them.
        row, column: ``SubspaceComparison.to_dict()`` of the row / column spaces (``a`` is
            ``S``, ``b`` is ``T``: ``coverage_s_by_t`` is ``C(a|b)``).
        factor_row, factor_column: the same for the factors' own spans (both LoRA), else None.
        phi_row, phi_column: ``φ(i, j)`` over the leading update directions, ``[I][J]`` lists.
        null_row, null_column: the Monte-Carlo nulls (when asked for), else ``None``.
    """

    module: str
    layer: int | None
    family: str
    shape: tuple[int, int]
    configured_a: int | None
    configured_b: int | None
    rank_a: int
    rank_b: int
    policy_a: str
    policy_b: str
    row: dict
    column: dict
    factor_row: dict | None
    factor_column: dict | None
    phi_row: list[list[float]]
    phi_column: list[list[float]]
    null_row: HaarNull | None = None
    null_column: HaarNull | None = None


@dataclass
class CompareResult:
    """What :func:`compare_lora` found: ``a`` and ``b`` and one row per shared module."""

    a: str
    b: str
    source_a: str
    source_b: str
    method_a: str
    method_b: str
    policy: str
    rho: float
    modules: list[ModuleComparison]
    notes: list[str] = field(default_factory=list)

"""Which coordinate budgets ``d`` a study's problem admits, checked before any run exists.

A subspace trial needs a map ``P: ℝ^k → ℝ^D`` with ``1 <= k <= D`` (every projection family;
seed 003 §0x02C), where ``D`` counts the trained parameters at θ₀ and ``k`` is ``d`` for DID
and ``d − m`` for SAID, whose ``m`` group scales (one per module holding parameters) are inside
``d`` (§0x02E; ``d = m`` is the degenerate no-update budget, admitted and reported as such).
A grid value outside that range could only produce failed runs, so :func:`check_budgets`
refuses it up front, naming the value and the admissible range.

Source: seed 003 §0x02C, §0x02E.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from gaugelab.experiments.intrinsic.spec import PROBLEM_LABELS, IntrinsicSpec
from gaugelab.experiments.intrinsic.train import char_model

__all__ = ["ProblemSize", "check_budgets", "problem_size"]

_N_OUT = {"scratch": 10, "finetune": 5}
"""Classes of the digits head: all ten (scratch), the new 5-way head for 5–9 (finetune)."""


@dataclass(frozen=True)
class ProblemSize:
    """The trained parameter count ``D`` and the SAID group count ``m`` of a problem at θ₀."""

    ambient_dim: int
    groups: int


def problem_size(spec: IntrinsicSpec) -> ProblemSize:
    """``D`` and ``m`` of ``spec``'s model: the MLP ``64 → hidden → … → k`` in closed form
    (finetune: the pretrain's width and depth, a 5-way head); the character Transformer by
    building it at its initialization (its parameters, grouped by owning module)."""
    if spec.problem == "char":
        model, _ = char_model(spec)
        names = [n for n, p in model.named_parameters() if p.requires_grad]
        D = sum(p.numel() for p in model.parameters() if p.requires_grad)
        return ProblemSize(D, len({n.rpartition(".")[0] for n in names}))
    hidden, layers = (
        (spec.pretrain.hidden, spec.pretrain.layers)
        if spec.problem == "finetune"
        else (spec.hidden, spec.layers)
    )
    sizes = [64] + [hidden] * layers + [_N_OUT[spec.problem]]
    return ProblemSize(sum(a * b + b for a, b in itertools.pairwise(sizes)), layers + 1)


def check_budgets(spec: IntrinsicSpec) -> ProblemSize:
    """Refuse any ``d`` of ``spec.dims`` the problem cannot train.

    Returns:
        The :class:`ProblemSize` the grid was checked against.

    Raises:
        ValueError: ``IntrinsicSpec: dims=<d>; allowed: …`` for the first inadmissible ``d``:
            DID needs ``1 <= d <= D``; SAID ``m <= d <= D + m``.
    """
    size = problem_size(spec)
    D, m = size.ambient_dim, size.groups
    where = f"{PROBLEM_LABELS[spec.problem]} has D = {D} parameters"
    if spec.method == "did":
        lo, hi = 1, D
        why = f"1 <= d <= {D} (the {spec.family} projection needs d <= D; {where})"
    else:
        lo, hi = m, D + m
        why = (
            f"{m} <= d <= {D + m} (SAID counts its m = {m} group scales inside d, and the "
            f"{spec.family} projection needs d − m <= D; {where}; d = m is the degenerate "
            "no-update budget)"
        )
    for d in spec.dims:
        if not lo <= d <= hi:
            raise ValueError(f"IntrinsicSpec: dims={d}; allowed: {why}")
    return size

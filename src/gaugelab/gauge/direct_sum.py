"""Block-diagonal groups: independent groups acting on disjoint sets of coordinates.

The gauge of an attention head whose rotary embedding covers only part of the head (GPT-NeoX's
``rotary_pct``) is such a sum: the RoPE-commuting torus on the rotary coordinates and the full
``GL`` on the others, with nothing mixing the two sets (a mixing element would carry a
position-rotated coordinate into one that is not rotated).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from gaugelab.gauge.base import Group, _eye_like

__all__ = ["DirectSum"]


@dataclass(frozen=True)
class DirectSum(Group):
    """The direct sum ``G₁ ⊕ G₂ ⊕ …`` embedded block-diagonally in ``GL(k)``.

    Part ``(index, G)`` acts on the coordinates ``index`` (``G.k == len(index)``): an element
    ``A`` has ``A[index][:, index] ∈ G`` for every part, the identity on coordinates no part
    names, and zeros between different parts.

    Attributes:
        k: matrix size.
        parts: tuple of ``(index, group)`` pairs; the index tuples are disjoint, in
            ``[0, k)``, and each as long as its group's ``k``.

    Raises:
        ValueError: overlapping or out-of-range coordinates, or an index whose length is not
            its group's ``k``.

    Source: singh2026lossbasis, §6 (the head gauge is the commutant of the position maps);
    su2021roformer (the rotary planes).
    """

    parts: tuple[tuple[tuple[int, ...], Group], ...]
    name: ClassVar[str] = "direct-sum"

    def __post_init__(self) -> None:
        super().__post_init__()
        seen: set[int] = set()
        parts = []
        for index, group in self.parts:
            index = tuple(int(i) for i in index)
            if len(index) != group.k:
                raise ValueError(
                    f"DirectSum: part {index!r} has {len(index)} coordinates for {group!r}; "
                    f"allowed: exactly group.k = {group.k}"
                )
            if (
                any(not 0 <= i < self.k for i in index)
                or seen & set(index)
                or len(set(index)) != len(index)
            ):
                raise ValueError(
                    f"DirectSum: part {index!r} overlaps another or leaves [0, {self.k}); "
                    "allowed: disjoint coordinates in [0, k)"
                )
            seen.update(index)
            parts.append((index, group))
        object.__setattr__(self, "parts", tuple(parts))

    @property
    def is_orthogonal(self) -> bool:  # type: ignore[override]
        """Whether every part is orthogonal (then so is every element)."""
        return all(group.is_orthogonal for _, group in self.parts)

    def _sample(self, generator, dtype, batch):
        A = torch.eye(self.k, dtype=dtype).expand(*batch, self.k, self.k).clone()
        for index, group in self.parts:  # drawn part by part, in the order given
            rows = torch.tensor(index)
            A[..., rows[:, None], rows] = group._sample(generator, dtype, batch)
        return A

    def _contains(self, A, atol):
        in_blocks = torch.zeros(self.k, self.k, dtype=torch.bool, device=A.device)
        ok = torch.ones(A.shape[:-2], dtype=torch.bool, device=A.device)
        for index, group in self.parts:
            rows = torch.tensor(index, device=A.device)
            in_blocks[rows[:, None], rows] = True
            ok = ok & torch.as_tensor(group._contains(A[..., rows[:, None], rows], atol))
        off = ((A - _eye_like(A)).abs() <= atol) | in_blocks
        return ok & off.all(dim=-1).all(dim=-1)

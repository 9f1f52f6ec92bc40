"""The Fastfood projection of seed 003 §0x02D: padding, blocks ``(1/p) H G Π H B``, stacking,
trimming, and the adjoint in reverse order with the inverse permutation.

With ``p = 2^⌈log2 d⌉`` and ``n_b = ⌈D/p⌉`` independently drawn blocks, the forward is::

    u[d] -> zero-pad to p -> B_b (signs) -> H_p -> Π_b -> G_b (diagonal) -> H_p -> ÷ p
         -> stack the n_b blocks -> trim to D

and the adjoint undoes the trimming (zeros appended), then applies every transpose in reverse
order, ``P_bᵀ g_b = (1/p) B_b H_p Π_bᵀ G_b H_p g_b``, sums the blocks' contributions, and only
then removes the padded coordinates. State: signs (int8), the Gaussian diagonal and the
permutations (int32), ``O(D)``; time ``O(D log p)``; no ``[D, d]`` matrix is ever formed.
``(Π x)_i = x[π_i]``, so ``Πᵀ z`` is the scatter ``y[π_i] = z_i``.

Source: seed 003 §0x02D; le2013fastfood; aghajanyan2021intrinsic (``M = H G Π H B``).
"""

from __future__ import annotations

import math

import torch

from gaugelab.lowrank.intrinsic.hadamard import fwht
from gaugelab.lowrank.intrinsic.projections import (
    Projection,
    ProjectionIdentity,
    _float_dtype,
    _random_map,
    check_dims,
)

__all__ = ["FASTFOOD_NORMALIZATIONS", "FastfoodProjection", "fastfood_width"]

FASTFOOD_NORMALIZATIONS = ("1/p", "unit-columns")
"""``1/p``: the seed's block normalization (two ``1/√p`` Hadamard transforms); ``unit-columns``:
``1/p`` and then one global factor ``1/c``, ``c² = Σ_b ‖G_b‖²/p``, which makes every column of
the untrimmed stack exactly unit-norm (column ``j`` of block ``b`` has norm ``‖G_b‖/√p``, the
same for every ``j``); trimming shortens only the last block's columns."""


def fastfood_width(subspace_dim: int) -> int:
    """``p = 2^⌈log2 d⌉``, the padded block width."""
    return 1 << max(0, (subspace_dim - 1).bit_length())


class FastfoodProjection(Projection):
    """The implicit map ``P(u) = trim_D [y_1; …; y_{n_b}]``, ``y_b = (1/p) H G_b Π_b H B_b ū``.

    Args:
        ambient_dim, subspace_dim: ``D`` and ``d`` (``1 <= d <= D``).
        seed: seed of the draw (in order: signs ``B`` [n_b, p], permutations ``Π`` [n_b, p] as
            the argsort of uniforms, Gaussian diagonal ``G`` [n_b, p]).
        normalization: one of :data:`FASTFOOD_NORMALIZATIONS` (recorded in the identity).
        dtype: ``torch.float32`` or ``torch.float64``.

    Raises:
        ValueError: bad dimensions, seed, normalization or dtype.

    Source: seed 003 §0x02D (the exact forward order and its adjoint).
    """

    def __init__(
        self,
        ambient_dim: int,
        subspace_dim: int,
        seed: int,
        *,
        normalization: str = "1/p",
        dtype: torch.dtype = torch.float32,
    ) -> None:
        D, d, gen = _random_map("FastfoodProjection", ambient_dim, subspace_dim, seed, dtype)
        p = fastfood_width(d)
        nb = math.ceil(D / p)
        signs = torch.randint(0, 2, (nb, p), generator=gen, dtype=torch.int8) * 2 - 1
        perms = torch.argsort(torch.rand(nb, p, generator=gen), dim=1).to(torch.int32)
        diagonal = torch.randn(nb, p, generator=gen, dtype=dtype)
        self._set(D, d, signs.to(torch.int8), diagonal, perms, normalization, seed)

    @classmethod
    def from_state(
        cls,
        ambient_dim: int,
        subspace_dim: int,
        signs: torch.Tensor,
        diagonal: torch.Tensor,
        permutations: torch.Tensor,
        *,
        normalization: str = "1/p",
    ) -> FastfoodProjection:
        """A Fastfood map from given factors (a fixture with rational diagonals, say).

        Args:
            ambient_dim, subspace_dim: ``D`` and ``d``.
            signs: ``[n_b, p]`` entries ±1 (any integer or float dtype).
            diagonal: ``[n_b, p]`` float32/float64 (the map's dtype).
            permutations: ``[n_b, p]`` integers, each row a permutation of ``0..p-1``.
            normalization: as the constructor.

        Raises:
            ValueError: shapes other than ``[⌈D/p⌉, p]``, signs not ±1, a row that is not a
                permutation, non-finite diagonal values.
        """
        D, d = check_dims("FastfoodProjection.from_state", ambient_dim, subspace_dim)
        p = fastfood_width(d)
        shape = (math.ceil(D / p), p)
        for name, t in (("signs", signs), ("diagonal", diagonal), ("permutations", permutations)):
            if tuple(t.shape) != shape:
                raise ValueError(
                    f"FastfoodProjection.from_state: {name} has shape "
                    f"{tuple(t.shape)}; allowed: {list(shape)} (⌈D/p⌉, p)"
                )
        if not bool(((signs == 1) | (signs == -1)).all()):
            raise ValueError("FastfoodProjection.from_state: signs has entries other than ±1")
        _float_dtype(diagonal.dtype, "FastfoodProjection.from_state")
        if not bool(torch.isfinite(diagonal).all()):
            raise ValueError("FastfoodProjection.from_state: diagonal has non-finite entries")
        ordered = torch.sort(permutations.long(), dim=1).values
        if not bool((ordered == torch.arange(p)).all()):
            raise ValueError(
                "FastfoodProjection.from_state: a row of permutations is not a "
                f"permutation of 0..{p - 1}"
            )
        self = cls.__new__(cls)
        self._set(
            D,
            d,
            signs.to(torch.int8),
            diagonal.clone(),
            permutations.to(torch.int32),
            normalization,
            None,
        )
        return self

    def _set(self, D, d, signs, diagonal, perms, normalization, seed) -> None:
        if normalization not in FASTFOOD_NORMALIZATIONS:
            raise ValueError(
                f"FastfoodProjection: normalization={normalization!r}; allowed: "
                f"{', '.join(FASTFOOD_NORMALIZATIONS)}"
            )
        self.width = p = fastfood_width(d)
        self.blocks = int(signs.shape[0])
        self.signs, self.diagonal, self.permutations = signs, diagonal, perms
        scale = 1.0 / p
        if normalization == "unit-columns":
            scale /= math.sqrt(float((diagonal.double() ** 2).sum()) / p)
        self.scale = scale
        dtype = str(diagonal.dtype).removeprefix("torch.")
        self.identity = ProjectionIdentity("fastfood", D, d, seed, normalization, dtype)

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        """``P u``: ``[..., d]`` → ``[..., D]`` in the exact order of §0x02D."""
        self._check(u, self.subspace_dim, "u", "forward")
        p, d = self.width, self.subspace_dim
        x = torch.nn.functional.pad(u, (0, p - d))  # [..., p]: zero-pad to p
        x = x.unsqueeze(-2) * self.signs.to(u.dtype)  # [..., n_b, p]: B_b
        x = fwht(x)  # H_p
        x = torch.take_along_dim(x, self._index(x), dim=-1)  # Π_b: x[..., b, π_b(i)]
        x = x * self.diagonal  # G_b
        x = fwht(x)  # H_p
        x = x * self.scale  # ÷ p (and the recorded global factor)
        x = x.reshape(*u.shape[:-1], self.blocks * p)  # stack the blocks
        return x[..., : self.ambient_dim]  # trim to D

    def adjoint(self, g: torch.Tensor) -> torch.Tensor:
        """``Pᵀ g``: ``[..., D]`` → ``[..., d]``: un-trim, then ``(1/p) B H Πᵀ G H`` per block,
        blocks summed, padding removed last."""
        self._check(g, self.ambient_dim, "g", "adjoint")
        p, nb = self.width, self.blocks
        x = torch.nn.functional.pad(g, (0, nb * p - self.ambient_dim))  # undo the trimming
        x = x.reshape(*g.shape[:-1], nb, p) * self.scale  # unstack; (1/p)
        x = fwht(x)  # H_pᵀ = H_p
        x = x * self.diagonal  # G_bᵀ = G_b
        x = torch.zeros_like(x).scatter_(-1, self._index(x), x)  # Π_bᵀ: y[π_b(i)] = x[i]
        x = fwht(x)  # H_p
        x = x * self.signs.to(g.dtype)  # B_bᵀ = B_b
        x = x.sum(dim=-2)  # the blocks' contributions summed ...
        return x[..., : self.subspace_dim]  # ... before the padding is removed

    def _index(self, x: torch.Tensor) -> torch.Tensor:
        return self.permutations.long().expand(x.shape)

    def _state(self) -> list[torch.Tensor]:
        return [self.signs, self.diagonal, self.permutations]

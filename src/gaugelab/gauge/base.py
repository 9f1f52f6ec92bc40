"""The base of every gauge group: :class:`Group` (a subgroup of GL(k) with sampling and
membership tests) and the matrix checks the concrete groups share.

Every group acts on factor pairs ``(U, V)`` by ``(U A, V A⁻ᵀ)`` (see ``gaugelab.gauge.act``).
Sampling takes an explicit ``torch.Generator`` and never touches global RNG state;
``generator=None`` means a fresh generator seeded 0.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch

from gaugelab.linalg.checks import (
    check_float_dtype,
    check_positive_int,
    default_generator,
    normalise_batch,
)


@dataclass(frozen=True)
class Group(abc.ABC):
    """A matrix group ``G ⊆ GL(k)`` acting on the factor gauge.

    Attributes:
        k: matrix size (the factor width), an int ``≥ 1``.
        name: kebab-case registry name (class attribute, the key in ``GROUPS``).
        is_orthogonal: True when ``G ⊆ O(k)``, so the action is ``(U A, V A)``.
    """

    k: int
    name: ClassVar[str]
    is_orthogonal: ClassVar[bool]

    def __post_init__(self) -> None:
        check_positive_int(self.k, type(self).__name__, "k")

    def sample(
        self,
        generator: torch.Generator | None = None,
        dtype: torch.dtype = torch.float64,
        batch: int | Sequence[int] = (),
    ) -> torch.Tensor:
        """Random elements of the group.

        Args:
            generator: CPU ``torch.Generator`` to draw from (advanced by the draw); ``None``
                uses a fresh generator seeded 0. The global RNG is never touched.
            dtype: real floating dtype of the result (default ``torch.float64``).
            batch: leading batch shape (an int or a sequence of ints), default ``()``.

        Returns:
            ``[*batch, k, k]`` tensor of dtype ``dtype`` on the CPU.

        Raises:
            ValueError: ``dtype`` is not a real floating dtype or ``batch`` is malformed.
            TypeError: ``generator`` is neither ``None`` nor a ``torch.Generator``.
        """
        func = f"{type(self).__name__}.sample"
        check_float_dtype(dtype, func)
        shape = normalise_batch(batch, func)
        return self._sample(default_generator(generator, func), dtype, shape)

    def contains(self, A: torch.Tensor, atol: float = 1e-10) -> bool:
        """Whether every matrix of ``A`` lies in the group, to within ``atol`` entrywise.

        Tolerances are on entries: e.g. orthogonality means ``max |AᵀA − I| ≤ atol``.
        Non-finite entries are never contained.

        Args:
            A: ``[k, k]`` or ``[..., k, k]`` real floating tensor.
            atol: absolute tolerance ``≥ 0`` (default ``1e-10``, meant for float64; pass a
                larger one for float32).

        Returns:
            True only if every ``[k, k]`` matrix of ``A`` is in the group.

        Raises:
            ValueError: ``A`` is not ``[..., k, k]`` or not floating; ``atol < 0``.
        """
        func = f"{type(self).__name__}.contains"
        if not isinstance(A, torch.Tensor) or not A.is_floating_point():
            raise ValueError(f"{func}: A must be a real floating tensor, got {_describe(A)}")
        if A.ndim < 2 or tuple(A.shape[-2:]) != (self.k, self.k):
            raise ValueError(
                f"{func}: A must have shape [..., {self.k}, {self.k}], got {tuple(A.shape)}"
            )
        if not atol >= 0:
            raise ValueError(f"{func}: atol must be a number >= 0, got {atol!r}")
        return bool(self._contains(A, float(atol)).all())

    def identity(self, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        """The identity element, ``[k, k]`` of dtype ``dtype``."""
        check_float_dtype(dtype, f"{type(self).__name__}.identity")
        return torch.eye(self.k, dtype=dtype)

    @abc.abstractmethod
    def _sample(
        self, generator: torch.Generator, dtype: torch.dtype, batch: tuple[int, ...]
    ) -> torch.Tensor:
        """``[*batch, k, k]`` random elements (arguments already checked)."""

    @abc.abstractmethod
    def _contains(self, A: torch.Tensor, atol: float) -> torch.Tensor:
        """``[...]`` bool tensor: membership of each matrix of ``A`` (arguments checked)."""


def _describe(A: object) -> str:
    if isinstance(A, torch.Tensor):
        return f"tensor of dtype {A.dtype}"
    return type(A).__name__


def _eye_like(A: torch.Tensor) -> torch.Tensor:
    return torch.eye(A.shape[-1], dtype=A.dtype, device=A.device)


def _close_to_identity(A: torch.Tensor, atol: float) -> torch.Tensor:
    """``[...]`` bool: ``max |A − I| ≤ atol`` per matrix (False for non-finite entries)."""
    return ((A - _eye_like(A)).abs() <= atol).all(dim=-1).all(dim=-1)


def _is_orthogonal(A: torch.Tensor, atol: float) -> torch.Tensor:
    """``[...]`` bool: ``max |AᵀA − I| ≤ atol`` per matrix."""
    return _close_to_identity(A.mT @ A, atol)

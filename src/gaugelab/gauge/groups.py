"""Symmetry groups of the factor gauge: subgroups of GL(k) with sampling and membership tests.

Every group acts on factor pairs ``(U, V)`` by ``(U A, V A⁻ᵀ)`` (see ``gaugelab.gauge.act``);
for the orthogonal subgroups ``A⁻ᵀ = A``. Sampling takes an explicit ``torch.Generator`` and
never touches global RNG state; ``generator=None`` means a fresh generator seeded 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from gaugelab.gauge.base import Group, _close_to_identity, _eye_like, _is_orthogonal
from gaugelab.linalg import haar_orthogonal


@dataclass(frozen=True)
class Orthogonal(Group):
    """The orthogonal group O(k), sampled from Haar measure.

    Source:
        mezzadri2007haar (Haar sampling); singh2026lossbasis, §3 (the orthogonal gauge).
    """

    name: ClassVar[str] = "orthogonal"
    is_orthogonal: ClassVar[bool] = True

    def _sample(self, generator, dtype, batch):
        return haar_orthogonal(self.k, generator=generator, dtype=dtype, batch=batch)

    def _contains(self, A, atol):
        return _is_orthogonal(A, atol)


@dataclass(frozen=True)
class SpecialOrthogonal(Group):
    """The rotation group SO(k) = {A ∈ O(k) : det A = +1}, sampled from Haar measure.

    A Haar sample of O(k) with determinant −1 has its last column negated, which maps
    Haar on O(k) to Haar on SO(k).
    """

    name: ClassVar[str] = "special-orthogonal"
    is_orthogonal: ClassVar[bool] = True

    def _sample(self, generator, dtype, batch):
        Q = haar_orthogonal(self.k, generator=generator, dtype=dtype, batch=batch)
        scale = torch.ones(*batch, self.k, dtype=dtype)  # [*batch, k], one factor per column
        scale[..., -1] = torch.where(torch.linalg.det(Q) < 0, -1.0, 1.0).to(dtype)  # ±1, exact
        return Q * scale.unsqueeze(-2)

    def _contains(self, A, atol):
        return _is_orthogonal(A, atol) & (torch.linalg.det(A) > 0)


@dataclass(frozen=True)
class SignedPermutation(Group):
    """The hyperoctahedral group: permutation matrices with signs (``2^k·k!`` elements).

    Sampling draws a uniform permutation and ``k`` independent uniform signs; row ``i`` of
    the sample has its one nonzero entry ``±1`` in column ``π(i)``. Every coordinatewise
    update rule is exactly equivariant under this group.
    """

    name: ClassVar[str] = "signed-permutation"
    is_orthogonal: ClassVar[bool] = True

    def _sample(self, generator, dtype, batch):
        k = self.k
        # argsort of i.i.d. uniforms is a uniform permutation (float64 ties have probability ~0).
        keys = torch.rand(*batch, k, generator=generator, dtype=torch.float64)
        perm = torch.argsort(keys, dim=-1)  # [*batch, k]
        signs = torch.randint(0, 2, (*batch, k), generator=generator) * 2 - 1  # [*batch, k]
        onehot = torch.nn.functional.one_hot(perm, k)  # [*batch, k, k], row i hot at π(i)
        return (onehot * signs.unsqueeze(-1)).to(dtype)

    def _contains(self, A, atol):
        mag = A.abs()
        near_zero = mag <= atol
        near_one = (mag - 1).abs() <= atol
        entries_ok = (near_zero | near_one).all(dim=-1).all(dim=-1)
        one_per_row = (near_one.sum(dim=-1) == 1).all(dim=-1)
        return _is_orthogonal(A, atol) & entries_ok & one_per_row


@dataclass(frozen=True)
class Torus(Group):
    """A torus SO(2)ⁿ of rotations in declared, disjoint coordinate planes.

    An element is the identity except, for each plane ``(i, j)``, a rotation by an angle
    ``θ``: ``A[i, i] = cos θ``, ``A[i, j] = −sin θ``, ``A[j, i] = sin θ``,
    ``A[j, j] = cos θ``, with ``θ`` uniform in ``[0, 2π)`` independently per plane. This
    is the symmetry of a RoPE attention head (planes = the rotary pairs).

    Attributes:
        k: matrix size.
        planes: tuple of disjoint pairs ``(i, j)``, ``0 ≤ i, j < k``, ``i ≠ j``; any
            sequence of pairs is accepted and stored as a tuple of int tuples.
        quarter_turns: restrict every angle to a multiple of π/2 (the finite subgroup
            shared with the signed permutations: a RoPE head with qk-norm).
    """

    planes: tuple[tuple[int, int], ...]
    quarter_turns: bool = False
    name: ClassVar[str] = "torus"
    is_orthogonal: ClassVar[bool] = True

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "planes", _check_planes(self.planes, self.k))

    def __repr__(self) -> str:
        extra = ", quarter_turns=True" if self.quarter_turns else ""
        return f"Torus(k={self.k}, planes={self.planes}{extra})"

    def _sample(self, generator, dtype, batch):
        k = self.k
        n_planes = len(self.planes)
        A = torch.eye(k, dtype=dtype).expand(*batch, k, k).clone()
        if self.quarter_turns:
            q = torch.randint(0, 4, (*batch, n_planes), generator=generator)
            cos = torch.tensor([1.0, 0.0, -1.0, 0.0], dtype=dtype)[q]  # exact cos(qπ/2)
            sin = torch.tensor([0.0, 1.0, 0.0, -1.0], dtype=dtype)[q]
        else:
            u = torch.rand(*batch, n_planes, generator=generator, dtype=dtype)  # [*batch, n]
            theta = 2 * math.pi * u
            cos, sin = torch.cos(theta), torch.sin(theta)
        for p, (i, j) in enumerate(self.planes):
            A[..., i, i] = cos[..., p]
            A[..., i, j] = -sin[..., p]
            A[..., j, i] = sin[..., p]
            A[..., j, j] = cos[..., p]
        return A

    def _contains(self, A, atol):
        in_blocks = torch.zeros(self.k, self.k, dtype=torch.bool, device=A.device)
        ok = _is_orthogonal(A, atol)
        for i, j in self.planes:
            in_blocks[[i, i, j, j], [i, j, i, j]] = True
            cos_ok = (A[..., i, i] - A[..., j, j]).abs() <= atol
            sin_ok = (A[..., i, j] + A[..., j, i]).abs() <= atol
            det = A[..., i, i] * A[..., j, j] - A[..., i, j] * A[..., j, i]
            ok = ok & cos_ok & sin_ok & ((det - 1).abs() <= atol)
        off = ((A - _eye_like(A)).abs() <= atol) | in_blocks
        ok = ok & off.all(dim=-1).all(dim=-1)
        if self.quarter_turns:
            mag = A.abs()
            ok = ok & ((mag <= atol) | ((mag - 1).abs() <= atol)).all(dim=-1).all(dim=-1)
        return ok


def _check_planes(planes: object, k: int) -> tuple[tuple[int, int], ...]:
    def bad(why: str) -> ValueError:
        return ValueError(
            f"Torus: planes must be disjoint pairs (i, j) with 0 <= i, j < k={k} and i != j; "
            f"{why}; got planes={planes!r}"
        )

    try:
        pairs = [tuple(pair) for pair in planes]  # type: ignore[union-attr]
    except TypeError:
        raise bad("not a sequence of pairs") from None
    seen: set[int] = set()
    out = []
    for pair in pairs:
        if len(pair) != 2 or not all(isinstance(x, int) and not isinstance(x, bool) for x in pair):
            raise bad(f"{pair!r} is not a pair of ints")
        i, j = pair
        if not (0 <= i < k and 0 <= j < k):
            raise bad(f"index out of range in {pair!r}")
        if i == j:
            raise bad(f"{pair!r} repeats a coordinate")
        if i in seen or j in seen:
            raise bad(f"{pair!r} overlaps another plane")
        seen.update((i, j))
        out.append((i, j))
    return tuple(out)


@dataclass(frozen=True)
class GeneralLinear(Group):
    """The general linear group GL(k), sampled on a well-conditioned slice.

    A sample is ``Q₁ diag(exp(s)) Q₂`` with ``Q₁``, ``Q₂`` Haar (drawn in that order) and
    ``s`` uniform in ``[−log 2, log 2]ᵏ``, so its singular values lie in ``[1/2, 2]``: it is
    invertible with condition number ``≤ 4`` and generically not orthogonal. Membership
    means invertibility: smallest singular value ``> atol``.

    Source:
        singh2026lossbasis, §3 (GL gauge action).
    """

    name: ClassVar[str] = "general-linear"
    is_orthogonal: ClassVar[bool] = False

    def _sample(self, generator, dtype, batch):
        k = self.k
        Q1 = haar_orthogonal(k, generator=generator, dtype=dtype, batch=batch)
        Q2 = haar_orthogonal(k, generator=generator, dtype=dtype, batch=batch)
        u = torch.rand(*batch, k, generator=generator, dtype=dtype)  # [*batch, k] in [0, 1)
        s = (2 * u - 1) * math.log(2)
        return (Q1 * torch.exp(s).unsqueeze(-2)) @ Q2

    def _contains(self, A, atol):
        finite = torch.isfinite(A).all(dim=-1).all(dim=-1)
        safe = torch.where(finite.unsqueeze(-1).unsqueeze(-1), A, torch.zeros_like(A))
        return finite & (torch.linalg.svdvals(safe)[..., -1] > atol)


@dataclass(frozen=True)
class Permutation(Group):
    """Permutation matrices (``k!`` elements): the hidden-unit symmetry of an MLP.

    Row ``i`` of a sample has its single 1 in column ``π(i)``, ``π`` uniform.
    """

    name: ClassVar[str] = "permutation"
    is_orthogonal: ClassVar[bool] = True

    def _sample(self, generator, dtype, batch):
        keys = torch.rand(*batch, self.k, generator=generator, dtype=torch.float64)
        perm = torch.argsort(keys, dim=-1)  # [*batch, k]
        return torch.nn.functional.one_hot(perm, self.k).to(dtype)

    def _contains(self, A, atol):
        near_one = (A - 1).abs() <= atol
        entries_ok = ((A.abs() <= atol) | near_one).all(dim=-1).all(dim=-1)
        return _is_orthogonal(A, atol) & entries_ok & (near_one.sum(dim=-1) == 1).all(dim=-1)


@dataclass(frozen=True)
class PositiveMonomial(Group):
    """Permutations times positive diagonal scalings, ``A = P D``: the ReLU MLP symmetry.

    ``relu(x W P D) = relu(x W) P D`` for ``D > 0``. Samples draw ``π`` uniform and the scales
    log-uniform in ``[1/2, 2]``. Not orthogonal: the action is ``(U A, V A⁻ᵀ)``.
    """

    name: ClassVar[str] = "positive-monomial"
    is_orthogonal: ClassVar[bool] = False

    def _sample(self, generator, dtype, batch):
        keys = torch.rand(*batch, self.k, generator=generator, dtype=torch.float64)
        perm = torch.argsort(keys, dim=-1)
        u = torch.rand(*batch, self.k, generator=generator, dtype=dtype)
        scales = torch.exp((2 * u - 1) * math.log(2.0))  # [*batch, k] in [1/2, 2]
        return torch.nn.functional.one_hot(perm, self.k).to(dtype) * scales.unsqueeze(-1)

    def _contains(self, A, atol):
        nonzero = A.abs() > atol
        positive = (A >= -atol).all(dim=-1).all(dim=-1)
        one_per_row = (nonzero.sum(dim=-1) == 1).all(dim=-1)
        one_per_col = (nonzero.sum(dim=-2) == 1).all(dim=-1)
        return positive & one_per_row & one_per_col


@dataclass(frozen=True)
class Trivial(Group):
    """The trivial group {I}: the control with no gauge (the identity twin)."""

    name: ClassVar[str] = "trivial"
    is_orthogonal: ClassVar[bool] = True

    def _sample(self, generator, dtype, batch):
        return torch.eye(self.k, dtype=dtype).expand(*batch, self.k, self.k).clone()

    def _contains(self, A, atol):
        return _close_to_identity(A, atol)


GROUPS: dict[str, type[Group]] = {
    cls.name: cls
    for cls in (
        Orthogonal,
        SpecialOrthogonal,
        SignedPermutation,
        Torus,
        GeneralLinear,
        Permutation,
        PositiveMonomial,
        Trivial,
    )
}
"""Registry: kebab-case name → group class."""


def make_group(name: str, k: int, **kwargs: Any) -> Group:
    """Build a group from its registry name.

    Args:
        name: a key of ``GROUPS`` (``"orthogonal"``, ``"special-orthogonal"``,
            ``"signed-permutation"``, ``"torus"``, ``"general-linear"``, ``"trivial"``).
        k: matrix size, an int ``≥ 1``.
        **kwargs: further fields of the group (``planes=`` for ``"torus"``).

    Returns:
        The group instance, e.g. ``make_group("torus", 4, planes=[(0, 1)])``.

    Raises:
        ValueError: unknown ``name`` (the message lists the known names), or a bad ``k`` or
            field value.
        TypeError: a keyword the group does not take.
    """
    try:
        cls = GROUPS[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"make_group: unknown group {name!r}; known groups: {', '.join(sorted(GROUPS))}"
        ) from None
    return cls(k, **kwargs)

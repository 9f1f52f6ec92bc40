"""Tests for gaugelab.gauge.groups: sampling, membership, registry."""

import pytest
import torch

from gaugelab.gauge import (
    GROUPS,
    GeneralLinear,
    Group,
    Orthogonal,
    Permutation,
    PositiveMonomial,
    SignedPermutation,
    SpecialOrthogonal,
    Torus,
    Trivial,
    make_group,
)

F64 = torch.float64


def gen(seed):
    return torch.Generator().manual_seed(seed)


def planes_for(k):
    return ((0, 1),) if k < 4 else ((0, 1), (2, 3))


def build(cls, k):
    return cls(k, planes=planes_for(k)) if cls is Torus else cls(k)


ALL = [
    Orthogonal,
    SpecialOrthogonal,
    SignedPermutation,
    Torus,
    GeneralLinear,
    Permutation,
    PositiveMonomial,
    Trivial,
]
CASES = [pytest.param(cls, k, id=f"{cls.name}-{k}") for cls in ALL for k in (2, 3, 5)]


@pytest.mark.parametrize(("cls", "k"), CASES)
def test_every_group_contains_its_samples(cls, k):
    group = build(cls, k)
    A = group.sample(gen(k), batch=(16,))
    assert A.shape == (16, k, k) and A.dtype == F64
    assert group.contains(A)
    assert all(group.contains(a) for a in A)
    assert group.contains(group.identity())


@pytest.mark.parametrize(("cls", "k"), CASES)
def test_orthogonal_subgroups_are_inside_orthogonal(cls, k):
    group = build(cls, k)
    assert Orthogonal(k).contains(group.sample(gen(1), batch=(8,))) == cls.is_orthogonal


@pytest.mark.parametrize(("cls", "k"), CASES)
def test_sampling_is_deterministic_given_the_seed_and_leaves_global_rng_alone(cls, k):
    group = build(cls, k)
    before = torch.get_rng_state()
    first = group.sample(gen(7), batch=(4,))
    assert torch.equal(first, group.sample(gen(7), batch=(4,)))
    assert torch.equal(group.sample(), group.sample(gen(0)))  # None = fresh generator seeded 0
    assert torch.equal(torch.get_rng_state(), before)
    if cls is not Trivial:
        assert not torch.equal(first, group.sample(gen(8), batch=(4,)))


@pytest.mark.parametrize(("cls", "k"), CASES)
def test_samples_honour_float32(cls, k):
    group = build(cls, k)
    A = group.sample(gen(0), dtype=torch.float32, batch=(3,))
    assert A.dtype == torch.float32
    assert group.contains(A, atol=1e-5)


def test_orthogonal_contains_signed_permutation_and_torus_samples():
    assert Orthogonal(5).contains(SignedPermutation(5).sample(gen(0)))
    assert Orthogonal(5).contains(Torus(5, planes=((0, 1), (2, 3))).sample(gen(0)))


def test_signed_permutation_does_not_contain_a_generic_orthogonal_matrix():
    assert not SignedPermutation(4).contains(Orthogonal(4).sample(gen(0)))


def test_torus_does_not_contain_a_generic_orthogonal_matrix():
    torus = Torus(5, planes=((0, 1), (2, 3)))
    assert not torus.contains(Orthogonal(5).sample(gen(0)))
    # nor rotations in an undeclared plane, nor a reflection inside a declared one
    assert not torus.contains(Torus(5, planes=((1, 4),)).sample(gen(0)))
    assert not torus.contains(torch.diag(torch.tensor([1.0, -1.0, 1.0, 1.0, 1.0], dtype=F64)))


def test_special_orthogonal_does_not_contain_a_reflection():
    reflection = torch.diag(torch.tensor([-1.0, 1.0, 1.0], dtype=F64))
    assert Orthogonal(3).contains(reflection)
    assert not SpecialOrthogonal(3).contains(reflection)
    assert (torch.linalg.det(SpecialOrthogonal(3).sample(gen(0), batch=(50,))) > 0).all()


@pytest.mark.parametrize("k", [2, 3, 5])
def test_general_linear_samples_are_well_conditioned_and_not_orthogonal(k):
    A = GeneralLinear(k).sample(gen(k), batch=(20,))
    sv = torch.linalg.svdvals(A)
    assert (sv >= 0.5 - 1e-12).all() and (sv <= 2.0 + 1e-12).all()  # exp(±log 2)
    defect = (A.mT @ A - torch.eye(k, dtype=F64)).abs().amax(dim=(-2, -1))
    assert (defect > 1e-3).all()  # every one of the 20 samples is visibly non-orthogonal
    assert not any(Orthogonal(k).contains(a) for a in A)


def test_general_linear_does_not_contain_a_singular_matrix():
    assert not GeneralLinear(2).contains(torch.tensor([[1.0, 2.0], [2.0, 4.0]], dtype=F64))
    assert not GeneralLinear(2).contains(torch.full((2, 2), float("nan"), dtype=F64))


def test_trivial_contains_only_the_identity():
    trivial = Trivial(3)
    assert trivial.contains(torch.eye(3, dtype=F64))
    assert not trivial.contains(-torch.eye(3, dtype=F64))
    assert not trivial.contains(Orthogonal(3).sample(gen(0)))
    assert not trivial.contains(torch.stack([torch.eye(3, dtype=F64), 2 * torch.eye(3, dtype=F64)]))


def test_signed_permutation_sampling_reaches_every_element():
    A = SignedPermutation(2).sample(gen(0), batch=(400,))
    # 2² signs × 2! permutations = 8 elements, each expected 50 times in 400 draws
    distinct = {tuple(a.flatten().tolist()) for a in A}
    assert len(distinct) == 8


def test_signed_permutation_rejects_near_misses():
    group = SignedPermutation(2)
    assert group.contains(torch.tensor([[0.0, -1.0], [1.0, 0.0]], dtype=F64))
    assert not group.contains(torch.tensor([[1.0, 0.0], [1.0, 0.0]], dtype=F64))
    c = 2**-0.5
    assert not group.contains(torch.tensor([[c, -c], [c, c]], dtype=F64))


def test_reprs_are_readable():
    assert repr(Orthogonal(16)) == "Orthogonal(k=16)"
    assert repr(Torus(4, planes=[(0, 1), (2, 3)])) == "Torus(k=4, planes=((0, 1), (2, 3)))"
    assert repr(GeneralLinear(3)) == "GeneralLinear(k=3)"
    quarter = Torus(4, planes=[(0, 1)], quarter_turns=True)
    assert repr(quarter) == "Torus(k=4, planes=((0, 1),), quarter_turns=True)"


def test_quarter_turn_torus_is_the_torus_inside_the_signed_permutations():
    group = Torus(4, planes=((0, 2), (1, 3)), quarter_turns=True)
    A = group.sample(gen(3), batch=(64,))
    assert SignedPermutation(4).contains(A)
    assert Torus(4, planes=((0, 2), (1, 3))).contains(A)
    # a generic rotation in the same planes is in the torus but not in its quarter-turn subgroup
    generic = Torus(4, planes=((0, 2), (1, 3))).sample(gen(4))
    assert not group.contains(generic)
    assert {round(float(a[0, 0])) for a in A} == {-1, 0, 1}  # cos of the four quarter turns


def test_permutations_are_signed_permutations_without_signs():
    P = Permutation(5).sample(gen(2), batch=(32,))
    assert SignedPermutation(5).contains(P)
    assert bool((P >= 0).all())
    flipped = P[0].clone()
    flipped[0] = -flipped[0]
    assert not Permutation(5).contains(flipped)


def test_positive_monomials_commute_with_relu_and_are_not_orthogonal():
    A = PositiveMonomial(6).sample(gen(5))
    x = torch.randn(10, 6, generator=gen(6), dtype=F64)
    assert torch.allclose(torch.relu(x @ A), torch.relu(x) @ A, rtol=0, atol=1e-15)
    assert not Orthogonal(6).contains(A)
    assert not PositiveMonomial(6).contains(-A)


def test_registry_names_are_kebab_case_and_make_group_builds_them():
    assert set(GROUPS) == {
        "orthogonal",
        "special-orthogonal",
        "signed-permutation",
        "torus",
        "general-linear",
        "permutation",
        "positive-monomial",
        "trivial",
    }
    for name, cls in GROUPS.items():
        assert cls.name == name and issubclass(cls, Group)
    assert make_group("orthogonal", 4) == Orthogonal(4)
    assert make_group("torus", 4, planes=[(0, 1)]) == Torus(4, planes=((0, 1),))


def test_groups_are_frozen():
    with pytest.raises(AttributeError):
        Orthogonal(3).k = 4  # type: ignore[misc]


@pytest.mark.parametrize("cls", ALL)
def test_k_below_one_is_rejected(cls):
    with pytest.raises(ValueError, match=rf"{cls.__name__}: k must be an integer >= 1, got 0"):
        build(cls, 0)


@pytest.mark.parametrize(
    ("planes", "match"),
    [
        (((0, 1), (1, 2)), r"overlaps.*\(1, 2\)"),
        (((0, 4),), r"out of range.*\(0, 4\)"),
        (((-1, 2),), r"out of range.*\(-1, 2\)"),
        (((2, 2),), r"repeats.*\(2, 2\)"),
        (((0, 1, 2),), r"not a pair.*\(0, 1, 2\)"),
    ],
)
def test_bad_torus_planes_are_rejected(planes, match):
    with pytest.raises(ValueError, match=match):
        Torus(4, planes=planes)


def test_unknown_group_name_lists_the_known_names():
    with pytest.raises(ValueError, match=r"unknown group 'rotation'.*general-linear.*trivial"):
        make_group("rotation", 3)


def test_contains_rejects_the_wrong_shape():
    with pytest.raises(ValueError, match=r"\[\.\.\., 3, 3\].*\(2, 2\)"):
        Orthogonal(3).contains(torch.eye(2, dtype=F64))


def test_torus_sample_has_the_declared_rotation_layout():
    A = Torus(3, planes=((2, 0),)).sample(gen(0))
    c, s = A[2, 2], A[0, 2]  # plane (i, j) = (2, 0): A[i,i] = cos, A[j,i] = sin, A[i,j] = -sin
    assert A[0, 0] == c and A[2, 0] == -s and A[1, 1] == 1.0
    assert all(A[1, j] == 0 and A[j, 1] == 0 for j in (0, 2))
    assert abs(float(c**2 + s**2) - 1) < 1e-15

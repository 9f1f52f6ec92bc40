"""Tests of the ``strict_dtypes`` fixture (tests/conftest.py): silent promotion fails loudly."""

import pytest
import torch

F32, F64 = torch.float32, torch.float64


def test_without_the_fixture_torch_promotes_silently():
    assert (torch.ones(3, dtype=F32) + torch.ones(3, dtype=F64)).dtype == F64


@pytest.mark.parametrize(
    "mix",
    [
        lambda a, b: a + b,
        lambda a, b: torch.add(a, b),
        lambda a, b: a.mul_(b),
        lambda a, b: torch.cat([a, b]),
        lambda a, b: a.copy_(b),
        lambda a, b: a.__setitem__(slice(0, 3), b),
        lambda a, b: a == b,
        lambda a, b: a[0] + b[0],  # two 0-dim tensors promote each other
    ],
    ids=["add", "torch.add", "mul_", "cat", "copy_", "setitem", "eq", "0-dim"],
)
def test_mixed_float32_float64_raises(strict_dtypes, mix):
    a, b = torch.ones(3, dtype=F64), torch.ones(3, dtype=F32)
    with pytest.raises(RuntimeError, match=r"strict_dtypes: .* torch.float32, torch.float64"):
        mix(a, b)


def test_same_dtype_scalars_zero_dim_and_explicit_casts_pass(strict_dtypes):
    a, b = torch.ones(3, dtype=F64), torch.ones(3, dtype=F32)
    assert (a + a * 2.0 - 1).dtype == F64  # same dtype, Python scalars
    assert (a * torch.tensor(0.5, dtype=F32)).dtype == F64  # a 0-dim tensor does not promote
    assert (a + torch.arange(3)).dtype == F64  # integer tensors are not floating
    assert (a + b.to(F64)).dtype == F64
    assert (a + b.double()).dtype == F64
    assert (a.float() + b).dtype == F32
    assert (b.type_as(a) + a).dtype == F64
    assert (a.to(b) + b).dtype == F32  # .to(other) casts explicitly


def test_foreach_lists_pair_up_by_position(strict_dtypes):
    params = [torch.ones(2, dtype=F64), torch.ones(2, dtype=F32)]
    torch._foreach_add_(params, [torch.ones(2, dtype=F64), torch.ones(2, dtype=F32)])
    with pytest.raises(RuntimeError, match="strict_dtypes"):
        torch._foreach_add_(params, [torch.ones(2, dtype=F32), torch.ones(2, dtype=F32)])


@pytest.mark.parametrize("foreach", [False, True])
def test_a_float64_torch_optimizer_step_passes(strict_dtypes, foreach):
    w = torch.nn.Parameter(torch.ones(4, 3, dtype=F64))
    opt = torch.optim.Adam([w], lr=0.1, foreach=foreach)
    for _ in range(2):
        opt.zero_grad()
        (w**2).sum().backward()
        opt.step()
    assert w.dtype == F64

"""Tests for DID and SAID on any nn.Module (seed 003 §0x02A, §0x02E, §0x02J): functional_call
without parameter surgery, named subsets, a head inside d or disclosed, and the ledgers."""

import pytest
import torch
from torch import nn

from gaugelab.lowrank.intrinsic.protocol import (
    DIDReparameterization,
    SAIDReparameterization,
    make_projection,
)

pytestmark = pytest.mark.usefixtures("strict_dtypes")

F64 = torch.float64


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3)).to(F64)


def _dense(D, d=4):
    return make_projection("dense", D, d, seed=1, dtype=F64)


def test_did_starts_at_theta0_and_never_modifies_the_module():
    model = _mlp()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    did = DIDReparameterization(model, _dense)
    x = torch.randn(9, 5, generator=torch.Generator().manual_seed(0), dtype=F64)
    assert torch.equal(did(x), model(x))  # u = 0: the run begins at θ₀
    assert [n for n, _ in did.named_parameters()] == ["u"]  # the module's tensors are not ours
    opt = torch.optim.SGD(did.parameters(), lr=0.1)
    did(x).square().sum().backward()
    opt.step()
    assert not torch.equal(did(x), model(x))
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters())  # no gradient leaks into the module
    assert did.ledger()["ambient_dim"] == 5 * 7 + 7 + 7 * 3 + 3


def test_did_gradient_is_the_pullback_of_the_full_gradient():
    model = _mlp()
    did = DIDReparameterization(model, _dense)
    x = torch.randn(9, 5, generator=torch.Generator().manual_seed(0), dtype=F64)
    did(x).sin().sum().backward()
    model(x).sin().sum().backward()  # ∇_θ L at θ₀ (u = 0)
    g = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    assert torch.allclose(did.u.grad, did.projection.adjoint(g), atol=1e-13)


def test_named_subset_and_a_disclosed_head():
    model = _mlp()
    inside = DIDReparameterization(model, _dense)
    body = DIDReparameterization(
        model, _dense, names=["0.weight", "0.bias"], direct=["2.weight", "2.bias"]
    )
    assert inside.ledger()["direct_parameters"] == 0  # the head counted inside d
    ledger = body.ledger()
    assert ledger["ambient_dim"] == 42 and ledger["direct"] == ["2.weight", "2.bias"]
    assert ledger["direct_parameters"] == 24  # trained directly, disclosed beside d
    assert {n for n, _ in body.named_parameters()} == {"u", "direct_2_weight", "direct_2_bias"}
    with pytest.raises(ValueError, match="not parameters of the module"):
        DIDReparameterization(model, _dense, names=["0.weight", "nope"])
    with pytest.raises(ValueError, match="writes D=10"):
        DIDReparameterization(model, make_projection("dense", 10, 2, 0, dtype=F64))


def test_said_groups_by_module_and_counts_scales_inside_d():
    model = _mlp()
    said = SAIDReparameterization(model, lambda D, k: _dense(D, k), 6)
    ledger = said.ledger()
    assert ledger["scales"] == 2 and ledger["shared"] == 4 and ledger["d"] == 6
    assert ledger["groups"] == [["0.weight", "0.bias"], ["2.weight", "2.bias"]]
    assert said.z.numel() + said.scales.numel() == 6
    x = torch.randn(4, 5, generator=torch.Generator().manual_seed(0), dtype=F64)
    assert torch.equal(said(x), model(x))  # z = 0 at the start
    per_tensor = SAIDReparameterization(model, lambda D, k: _dense(D, k), 6, groups="tensor")
    assert per_tensor.ledger()["shared"] == 2
    with pytest.raises(ValueError, match="covering"):
        SAIDReparameterization(model, lambda D, k: _dense(D, k), 6, groups=[["0.weight"]])

"""Tests for gaugelab.optim.hybrid: the Muon hybrid is muon on hidden matrices, adam elsewhere."""

import copy

import pytest
import torch

from gaugelab import NonFiniteError
from gaugelab.models import Transformer, TransformerConfig
from gaugelab.optim import Hybrid, is_hidden_matrix, make_optimizer, muon_hybrid

F64 = torch.float64
CONFIG = TransformerConfig(d_model=16, n_heads=2, d_head=8, d_mlp=12, d_vocab=9, n_ctx=4)


def model():
    return Transformer(CONFIG, seed=0, dtype=F64)


def loss(m):
    x = torch.randint(0, 9, (5, 4), generator=torch.Generator().manual_seed(1))
    return m(x).square().mean()


def test_routing_sends_hidden_matrices_to_muon_and_the_rest_to_adam():
    m = model()
    hybrid = muon_hybrid(m.named_parameters())
    muon_ids = {id(p) for g in hybrid.parts["muon"].param_groups for p in g["params"]}
    for name, p in m.named_parameters():
        expected = (".attn." in name or ".mlp." in name) and p.dim() == 2
        assert (id(p) in muon_ids) == expected, name
    assert is_hidden_matrix("blocks.0.mlp.fc_in.weight", torch.zeros(3, 4, 5), member_dims=1)
    assert not is_hidden_matrix("blocks.0.ln1.weight", torch.zeros(3, 4), member_dims=1)
    assert not is_hidden_matrix("embed.weight", torch.zeros(4, 5))


def test_hybrid_step_equals_its_parts_stepped_separately():
    a, b = model(), model()
    hybrid = muon_hybrid(a.named_parameters(), lr=0.02, adam_lr=1e-3)
    hidden = [p for n, p in b.named_parameters() if is_hidden_matrix(n, p)]
    rest = [p for n, p in b.named_parameters() if not is_hidden_matrix(n, p)]
    muon, adam = make_optimizer("muon", hidden, lr=0.02), make_optimizer("adam", rest, lr=1e-3)
    for _ in range(3):
        hybrid.zero_grad()
        loss(a).backward()
        hybrid.step()
        muon.zero_grad()
        adam.zero_grad()
        loss(b).backward()
        muon.step()
        adam.step()
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb)


def test_a_nan_in_one_part_moves_no_part():
    m = model()
    hybrid = muon_hybrid(m.named_parameters())
    loss(m).backward()
    m.embed.weight.grad[0, 0] = float("nan")  # an adam parameter; muon steps first
    before = copy.deepcopy(m.state_dict())
    with pytest.raises(NonFiniteError):
        hybrid.step()
    for name, value in m.state_dict().items():
        assert torch.equal(value, before[name]), name


def test_state_dict_round_trip_resumes_bit_identically():
    a = model()
    hybrid = muon_hybrid(a.named_parameters())
    for _ in range(2):
        hybrid.zero_grad()
        loss(a).backward()
        hybrid.step()
    b = copy.deepcopy(a)
    resumed = muon_hybrid(b.named_parameters())
    resumed.load_state_dict(copy.deepcopy(hybrid.state_dict()))
    for m, opt in ((a, hybrid), (b, resumed)):
        opt.zero_grad()
        loss(m).backward()
        opt.step()
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb)
    with pytest.raises(ValueError, match="parts"):
        resumed.load_state_dict({"muon": hybrid.state_dict()["muon"]})


def test_bad_hybrids_raise():
    with pytest.raises(ValueError, match="empty"):
        Hybrid({})
    p = torch.zeros(3, 3, requires_grad=True)
    with pytest.raises(ValueError, match="twice"):
        Hybrid({"a": make_optimizer("gd", [p]), "b": make_optimizer("gd", [p])})
    with pytest.raises(ValueError, match="hidden matrices"):
        muon_hybrid([("embed.weight", p)])

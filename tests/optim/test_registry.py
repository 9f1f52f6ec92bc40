"""gaugelab.optim.registry: names → rules, make_optimizer's validation, the claims table."""

import pytest
import torch

from gaugelab.optim import (
    BREAKS,
    CLAIM_GROUPS,
    CLAIMS,
    EQUIVARIANT,
    OPTIMIZERS,
    claim,
    get_rule,
    make_optimizer,
)

ORTHOGONALLY_EQUIVARIANT = {
    "gd", "heavy-ball", "nesterov", "scalar-adam", "muon", "shampoo", "scaled-gd",
}  # fmt: skip


def params():  # a factor pair (U, V): scaled-gd preconditions each factor by the other
    return [torch.zeros(3, 2, dtype=torch.float64, requires_grad=True) for _ in range(2)]


def test_make_optimizer_rejects_an_unknown_rule_and_lists_the_known_ones():
    with pytest.raises(ValueError, match="adamm") as info:
        make_optimizer("adamm", params())
    assert "known rules" in str(info.value)
    for name in OPTIMIZERS:
        assert name in str(info.value)


def test_make_optimizer_rejects_an_unknown_hyperparameter_and_lists_the_allowed_ones():
    with pytest.raises(ValueError, match="foo") as info:
        make_optimizer("adam", params(), foo=1)
    message = str(info.value)
    for allowed in ("lr", "betas", "eps", "member_dims"):
        assert allowed in message


@pytest.mark.parametrize("rule", sorted(OPTIMIZERS))
def test_make_optimizer_builds_the_registered_class(rule):
    opt = make_optimizer(rule, params(), lr=1e-2)
    assert type(opt) is OPTIMIZERS[rule].cls and opt.rule_name == rule
    assert get_rule(rule) is OPTIMIZERS[rule]


@pytest.mark.parametrize("rule", sorted(OPTIMIZERS))
def test_claims_cover_every_group_with_the_protocol_orthogonal_verdict(rule):
    assert set(CLAIMS[rule]) == set(CLAIM_GROUPS)
    expected = EQUIVARIANT if rule in ORTHOGONALLY_EQUIVARIANT else BREAKS
    assert CLAIMS[rule]["orthogonal"].property == expected
    assert CLAIMS[rule]["signed-permutation"].property == EQUIVARIANT
    assert CLAIMS[rule]["general-linear"].property == BREAKS


def test_adam_p_claim_is_equivariant_only_at_p_zero_with_the_rms_mean():
    assert claim("adam-p", "orthogonal", p=0.0).property == EQUIVARIANT
    assert claim("adam-p", "orthogonal", p=0.0, mean="geometric").property == BREAKS
    assert claim("adam-p", "orthogonal", p=0.25).property == BREAKS
    with pytest.raises(ValueError, match="bogus"):
        claim("adam", "bogus")

"""Tests for gaugelab.equivariance.twins: building the twins and reading the triplet."""

import pytest
import torch

from gaugelab.equivariance.distance import relative_distance
from gaugelab.equivariance.twins import (
    gauge_elements,
    make_twins,
    perturb_qk,
    triplet_verdict,
    twin_verdict,
)
from gaugelab.equivariance.verdicts import (
    BASIS_SENSITIVE,
    CHAOTIC,
    EQUIVARIANT,
    INCONCLUSIVE,
    NONDETERMINISTIC,
)
from gaugelab.linalg import haar_orthogonal
from gaugelab.models import Transformer, TransformerConfig
from gaugelab.models.heads import qk_invariants
from gaugelab.models.symmetry import head_gauge

SMALL = TransformerConfig(
    n_layers=2, d_model=16, n_heads=4, d_head=4, n_key_value_heads=2, d_mlp=32, d_vocab=11,
    n_ctx=5, init_std=0.2,
)  # fmt: skip


def test_twin_verdict_reads_the_triplet():
    assert twin_verdict([4e-3, 1e-1], [3e-7, 5e-7])[0] == BASIS_SENSITIVE
    assert twin_verdict([2e-7, 3e-7, 1e-6], [3e-7, 2e-7, 2e-6])[0] == EQUIVARIANT
    assert twin_verdict([5e-16, 6e-16], [3e-7, 2e-6])[0] == EQUIVARIANT  # float64: far below
    assert twin_verdict([2e-7, 0.08, 0.07], [3e-7, 0.015, 0.013])[0] == CHAOTIC  # both far up
    assert twin_verdict([2e-7, 1e-4, 0.5], [3e-7, 1e-2, 0.4])[0] == CHAOTIC
    assert twin_verdict([2e-7, 1e-3], [3e-7, 1e-7])[0] == INCONCLUSIVE
    with pytest.raises(ValueError):
        twin_verdict([], [])


def test_a_moving_identity_twin_reads_nondeterministic_before_anything_else():
    records = {
        0: {"identity/logit_distance": 0.0},
        1: {"identity/logit_distance": 0.0, "gauge/logit_distance": 4e-3,
            "noise/logit_distance": 3e-7},
        2: {"identity/logit_distance": 1e-9, "gauge/logit_distance": 5e-3,
            "noise/logit_distance": 4e-7},
    }  # fmt: skip
    verdict, why = triplet_verdict(records)
    assert verdict == NONDETERMINISTIC and "step 2" in why
    records[2]["identity/logit_distance"] = 0.0
    assert triplet_verdict(records)[0] == BASIS_SENSITIVE
    assert triplet_verdict({0: {}, 1: {"gauge/logit_distance": 1e-3}})[0] == INCONCLUSIVE


def test_twins_start_as_the_same_function_with_the_same_qk_invariants():
    base = Transformer(SMALL, seed=3, dtype=torch.float64)
    members, names = make_twins(
        base, ("gauge", "identity", "noise"), gauge_seed=5, noise_seed=6, noise_scale=1e-7
    )
    assert names == ["base", "gauge", "identity", "noise"]
    x = torch.randint(0, 11, (8, 5), generator=torch.Generator().manual_seed(0))
    torch.set_grad_enabled(False)
    try:
        check_function_identical(base, members, x)
    finally:
        torch.set_grad_enabled(True)
    params = [dict(m.named_parameters()) for m in (base, members[1])]
    qk = [qk_invariants(p, SMALL).detach() for p in params]
    assert float(relative_distance(qk[1], qk[0])) <= 1e-13  # grouped-query heads: QK stays put
    assert not torch.allclose(members[1].W_Q, base.W_Q)  # the factors themselves moved


def check_function_identical(base, members, x):
    base_out = base(x)
    gauge, identity, noise = members[1:]
    assert float(relative_distance(gauge(x), base_out)) <= 1e-13
    assert torch.equal(identity(x), base_out)
    assert 0 < float(relative_distance(noise(x), base_out)) <= 1e-5


def test_the_reference_draw_is_the_unsigned_qr_factor_in_sequence_layer_then_head():
    elements = gauge_elements(SMALL, seed=777, dtype=torch.float32)  # the default draw
    assert elements.shape == (2, 2, 4, 4) and elements.dtype == torch.float32
    g = torch.Generator().manual_seed(777)
    for layer in range(2):
        for head in range(2):
            Q = torch.linalg.qr(torch.randn(4, 4, generator=g))[0]
            assert torch.equal(elements[layer, head], Q.mT)  # W_Q[h] ↦ W_Q[h] Qᵀ, bit for bit
    eye = torch.eye(4).expand(2, 2, 4, 4)
    assert float((elements.mT @ elements - eye).abs().max()) <= 1e-6
    # in float64 the same float32 stream, factored in float64: orthogonal to round-off
    wide = gauge_elements(SMALL, seed=777, dtype=torch.float64)
    assert float((wide.mT @ wide - eye.double()).abs().max()) <= 1e-13
    assert float((wide - elements.double()).abs().max()) <= 1e-5


def test_the_haar_draw_is_still_available_and_orthogonal():
    elements = gauge_elements(SMALL, seed=777, dtype=torch.float64, draw="haar")
    g = torch.Generator().manual_seed(777)
    expected = torch.stack([haar_orthogonal(4, generator=g) for _ in range(4)]).view(2, 2, 4, 4)
    assert torch.equal(elements, expected)  # the group's own sample, sign-fixed
    assert head_gauge(SMALL).contains(elements, atol=1e-12)
    reference = gauge_elements(SMALL, seed=777, dtype=torch.float64)
    assert float((elements - reference).abs().max()) > 0.1  # two different draws


def test_the_reference_draw_keeps_a_gauge_that_is_not_orthogonal_to_its_own_group():
    qk_norm = TransformerConfig(**{**SMALL.model_dump(), "qk_norm": True})
    elements = gauge_elements(qk_norm, seed=777, dtype=torch.float64)
    assert head_gauge(qk_norm).contains(elements)  # signed permutations, not a QR factor


def test_the_reference_noise_is_drawn_in_float32_and_the_haar_noise_in_float64():
    base = Transformer(SMALL, seed=3, dtype=torch.float64)
    for draw, dtype in (("reference", torch.float32), ("haar", torch.float64)):
        twin = Transformer(SMALL, seed=3, dtype=torch.float64)
        perturb_qk(twin, seed=888, scale=1e-7, draw=draw)
        g = torch.Generator().manual_seed(888)
        for b, t in zip(base.blocks, twin.blocks, strict=True):
            for name in ("q_proj", "k_proj"):  # per block: query, then key
                noise = torch.randn(getattr(b.attn, name).weight.shape, generator=g, dtype=dtype)
                expected = getattr(b.attn, name).weight + 1e-7 * noise.double()
                assert torch.equal(getattr(t.attn, name).weight, expected), (draw, name)


def test_an_unknown_draw_is_refused_naming_it():
    base = Transformer(SMALL, seed=3, dtype=torch.float64)
    with pytest.raises(ValueError, match="gauge_draw='sobol'; allowed: reference, haar"):
        make_twins(base, ("gauge",), gauge_seed=1, noise_seed=2, noise_scale=1e-7,
                   gauge_draw="sobol")  # fmt: skip

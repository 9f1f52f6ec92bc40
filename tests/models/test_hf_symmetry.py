"""The derived gauge of each Hugging Face family, applied to the module's own weights: the
identity leaves it bit for bit, random elements of the QK and OV gauges leave its logits to
round-off (float64), and an element outside the gauge (the other RoPE pairing, GL on rotary
coordinates) changes them."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from tests.support.hf_configs import tiny_model  # noqa: E402

from gaugelab.gauge import DirectSum, GeneralLinear, Orthogonal, Torus  # noqa: E402
from gaugelab.models.heads import ov_product, qk_product  # noqa: E402
from gaugelab.models.hf_symmetry import (  # noqa: E402
    apply_hf_gauge,
    hf_attention,
    hf_head_gauge,
    hf_head_weights,
    hf_ov_gauge,
)
from gaugelab.models.symmetry import GaugeElements  # noqa: E402

FAMILIES = ("gpt2", "gpt_neox", "llama", "mistral", "qwen2")
TOKENS = torch.randint(0, 61, (3, 12), generator=torch.Generator().manual_seed(1))


def _logits(model) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=TOKENS, use_cache=False).logits


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).detach().norm() / b.detach().norm())


@pytest.mark.parametrize("family", FAMILIES)
def test_identity_is_bitwise_and_gauge_keeps_logits(family):
    model = tiny_model(transformers, family)
    layout = hf_attention(model)
    base = _logits(model)
    qk_gauge, ov_gauge = hf_head_gauge(layout), hf_ov_gauge(layout)
    identity = GaugeElements(qk=qk_gauge.identity(), ov=ov_gauge.identity())
    assert torch.equal(_logits(apply_hf_gauge(model, layout, identity)), base)
    generator = torch.Generator().manual_seed(7)
    for _ in range(2):
        qk, ov = qk_gauge.sample(generator), ov_gauge.sample(generator)
        assert qk_gauge.contains(qk) and ov_gauge.contains(ov)
        moved = apply_hf_gauge(model, layout, GaugeElements(qk=qk, ov=ov))
        assert _relative(_logits(moved), base) <= 1e-9
        # the weights did move, and the head invariants did not
        before = hf_head_weights(dict(model.named_parameters()), layout)
        after = hf_head_weights(dict(moved.named_parameters()), layout)
        assert _relative(after.W_Q, before.W_Q) > 0.1 and _relative(after.W_V, before.W_V) > 0.1
        s = layout.group_size
        assert (
            _relative(qk_product(after.W_Q, after.W_K, s), qk_product(before.W_Q, before.W_K, s))
            < 1e-9
        )
        assert (
            _relative(ov_product(after.W_V, after.W_O, s), ov_product(before.W_V, before.W_O, s))
            < 1e-9
        )


def test_layouts_read_from_the_configs():
    gpt2, neox, llama = (
        hf_attention(tiny_model(transformers, f)) for f in ("gpt2", "gpt_neox", "llama")
    )
    assert (gpt2.rotary_dims, gpt2.group_size, gpt2.d_head) == (0, 1, 8)
    assert (neox.rotary_dims, neox.rope_planes()) == (4, ((0, 2), (1, 3)))
    assert (llama.rotary_dims, llama.kv_heads, llama.group_size) == (8, 2, 2)
    assert llama.rope_planes() == ((0, 4), (1, 5), (2, 6), (3, 7))
    assert isinstance(hf_head_gauge(gpt2).groups[0][0], GeneralLinear)
    assert isinstance(hf_head_gauge(gpt2, orthogonal=True).groups[0][0], Orthogonal)
    assert isinstance(hf_head_gauge(llama).groups[1][1], Torus)
    assert isinstance(hf_head_gauge(neox).groups[0][0], DirectSum)


@pytest.mark.parametrize("family", ["llama", "gpt_neox"])
def test_elements_outside_the_rope_gauge_change_the_logits(family):
    """The adjacent pairing (2i, 2i+1) is not the rotate_half pairing, and GL does not commute
    with the position rotations: both change the function, so the derived torus is the one."""
    model = tiny_model(transformers, family)
    layout = hf_attention(model)
    base = _logits(model)
    D, r = layout.d_head, layout.rotary_dims
    generator = torch.Generator().manual_seed(3)
    adjacent = Torus(D, tuple((2 * i, 2 * i + 1) for i in range(r // 2)))
    for G in (adjacent, GeneralLinear(D)):
        qk = G.sample(generator, batch=(layout.n_layers, layout.kv_heads))
        moved = apply_hf_gauge(model, layout, GaugeElements(qk=qk))
        assert _relative(_logits(moved), base) > 1e-4


def test_bad_elements_and_models_are_refused():
    model = tiny_model(transformers, "gpt2")
    layout = hf_attention(model)
    with pytest.raises(ValueError, match=r"elements\.qk has shape"):
        apply_hf_gauge(model, layout, GaugeElements(qk=torch.eye(8)))
    with pytest.raises(ValueError, match=r"elements\.mlp"):
        apply_hf_gauge(model, layout, GaugeElements(mlp=[[torch.eye(64)]]))
    bert = transformers.BertModel(
        transformers.BertConfig(
            vocab_size=20,
            hidden_size=8,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=8,
        )
    )
    with pytest.raises(ValueError, match="model_type='bert' has no derived gauge; allowed: gpt2"):
        hf_attention(bert)


def test_direct_sum_membership_and_refusals():
    G = DirectSum(4, (((0, 2), Torus(2, ((0, 1),))), ((1, 3), GeneralLinear(2))))
    A = G.sample(torch.Generator().manual_seed(0), batch=3)
    assert bool(G.contains(A)) and not G.is_orthogonal
    B = A.clone()
    B[:, 0, 1] = 0.5  # mixes the two parts
    assert not bool(G.contains(B))
    with pytest.raises(ValueError, match="overlaps"):
        DirectSum(3, (((0, 1), Orthogonal(2)), ((1, 2), Orthogonal(2))))
    with pytest.raises(ValueError, match="coordinates"):
        DirectSum(3, (((0,), Orthogonal(2)),))

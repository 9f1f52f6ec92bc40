"""The twin triplet built on a Hugging Face causal LM of every family (float64, tiny configs
built here): the identity twin is the base bit for bit, the gauge twin (the protocol's draw from
the orthogonal part of the derived gauge) computes the base's logits to round-off while its
weights moved, the noise twin sits at its 1e-7 scale, and the head invariants see the same."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from tests.support.hf_configs import tiny_model  # noqa: E402

from gaugelab.equivariance.hf_twins import hf_invariants, make_hf_twins  # noqa: E402
from gaugelab.models import Ensemble  # noqa: E402
from gaugelab.models.hf import CausalLMLogits  # noqa: E402
from gaugelab.models.hf_symmetry import hf_attention  # noqa: E402

TOKENS = torch.randint(0, 61, (3, 12), generator=torch.Generator().manual_seed(2))


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).detach().norm() / b.detach().norm())


@pytest.mark.parametrize("family", ["gpt2", "gpt_neox", "llama", "mistral", "qwen2"])
@pytest.mark.parametrize("draw", ["reference", "haar"])
def test_the_triplet_on_each_family(family, draw):
    model = tiny_model(transformers, family)
    layout = hf_attention(model)
    members, names = make_hf_twins(
        CausalLMLogits(model), layout, ("gauge", "identity", "noise"),
        gauge_seed=5, noise_seed=6, noise_scale=1e-7, gauge_draw=draw,
    )  # fmt: skip
    assert names == ["base", "gauge", "identity", "noise"]
    ensemble = Ensemble(members)
    with torch.no_grad():
        logits = ensemble(TOKENS)  # [E, B, T, V]
    base, gauge, identity, noise = logits
    assert torch.equal(identity, base)
    assert _relative(gauge, base) <= 1e-9
    assert 1e-10 < _relative(noise, base) < 1e-5
    qk, ov = hf_invariants(layout)(ensemble.stacked_parameters())  # [E, L, H, d, d]
    assert qk.shape == (4, layout.n_layers, layout.n_heads, 32, 32)
    assert _relative(qk[1], qk[0]) <= 1e-12 and torch.equal(qk[2], qk[0])
    assert torch.equal(ov[1], ov[0]) and torch.equal(ov[3], ov[0])  # W_V, W_O untouched
    q = f"model.{layout.paths[0]}.{layout.projection('W_Q')[0]}.weight"
    assert _relative(ensemble.member_parameters(1)[q], ensemble.member_parameters(0)[q]) > 0.01

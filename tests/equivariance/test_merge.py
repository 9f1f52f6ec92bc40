"""Tests for gaugelab.equivariance.merge: alignment undoes a pure change of head basis."""

import pytest
import torch

from gaugelab.equivariance.merge import align_heads, average_models, merge_twin
from gaugelab.experiments.twins.run import TwinSpec, build_members
from gaugelab.models.symmetry import GaugeElements, apply_gauge, ov_gauge
from gaugelab.tasks import ModularArithmetic


@pytest.fixture(scope="module")
def twins():
    spec = TwinSpec(dtype="float64")
    spec = spec.model_copy(update={"model": spec.model.model_copy(update={"n_key_value_heads": 2})})
    members, _ = build_members(spec)
    return members


def test_alignment_recovers_a_pure_gauge_twin_exactly(twins):
    base, gauge = twins[0], twins[1]
    gen = torch.Generator().manual_seed(3)
    moved = apply_gauge(gauge, GaugeElements(ov=ov_gauge(base.config, orthogonal=True).sample(gen)))
    aligned = apply_gauge(moved, align_heads(base, moved))
    for p, q in zip(aligned.parameters(), base.parameters(), strict=True):
        assert (p - q).abs().max() <= 1e-12


def test_merging_a_pure_gauge_twin_after_alignment_changes_nothing(twins):
    task = ModularArithmetic()
    result = merge_twin(twins[0], twins[1], task.val_inputs, task.val_labels).metrics
    assert result["aligned/qk_residual"] <= 1e-12
    assert abs(result["aligned/val_loss"] - result["base/val_loss"]) <= 1e-12
    assert abs(result["twin/val_loss"] - result["base/val_loss"]) <= 1e-12


def test_average_models_is_a_parameterwise_convex_combination(twins):
    a, b = twins[0], twins[3]
    mid = average_models(a, b, 0.25)
    for p, q, r in zip(mid.parameters(), a.parameters(), b.parameters(), strict=True):
        assert torch.allclose(p, 0.75 * q + 0.25 * r, rtol=0, atol=1e-15)
    with pytest.raises(ValueError, match="weight"):
        average_models(a, b, 1.5)

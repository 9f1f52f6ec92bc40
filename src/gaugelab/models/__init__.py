"""Models: the decoder-only Transformer, its configuration, per-head views, and the gauge it
really has."""

from gaugelab.models import lora as lora  # the LoRA layer: gaugelab.models.lora
from gaugelab.models.config import TransformerConfig
from gaugelab.models.ensemble import Ensemble
from gaugelab.models.heads import (
    HeadWeights,
    head_weight,
    head_weights,
    ov_invariants,
    qk_invariants,
)
from gaugelab.models.transformer import Transformer

__all__ = [
    "Ensemble",
    "HeadWeights",
    "Transformer",
    "TransformerConfig",
    "head_weight",
    "head_weights",
    "ov_invariants",
    "qk_invariants",
]

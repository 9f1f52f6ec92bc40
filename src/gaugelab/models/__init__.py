"""Models: the decoder-only Transformer, its configuration, and the gauge it really has."""

from gaugelab.models.config import TransformerConfig
from gaugelab.models.ensemble import Ensemble
from gaugelab.models.transformer import Transformer

__all__ = ["Ensemble", "Transformer", "TransformerConfig"]

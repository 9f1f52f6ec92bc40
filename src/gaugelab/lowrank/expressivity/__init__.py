"""Expressivity ledgers: what rank is enough for, with the quantifiers carried along (seed 003
§0x0A).

* ``claims`` — The six coordinates every expressivity claim declares (seed 003 §0x0AA), one record
  per ledger of :mod:`gaugelab.lowrank.expressivity.ledgers`.
* ``deep`` — Deep-factorization ledgers of :mod:`gaugelab.lowrank.expressivity.ledgers` (seed 003
  §0x0AQ–0x0AT): the complement recurrence, the compression residual and bound, the Deep LoRA
  parameter count.
* ``ledgers`` — Expressivity ledgers: what rank is enough for, with the quantifiers carried along.

The public names of ``ledgers`` are re-exported here.
"""

from gaugelab.lowrank.expressivity.ledgers import (
    CLAIMS,
    DeepLoraParameters,
    Matrix,
    TheoremClaim,
    complement_recurrence,
    compression_error_bound,
    compression_residual,
    deep_lora_parameters,
    exact_adapter_rank,
    first_omitted_singular_value,
    generic_uniform_rank,
    ntk_existence_rank,
    ntk_landscape_rank,
    padded_factorization,
    partition_covers,
    product_gap,
    telescoping_terms,
    transformer_rank_threshold,
    truncation_residuals,
    uniform_partition_rank,
)

__all__ = [
    "CLAIMS",
    "DeepLoraParameters",
    "Matrix",
    "TheoremClaim",
    "complement_recurrence",
    "compression_error_bound",
    "compression_residual",
    "deep_lora_parameters",
    "exact_adapter_rank",
    "first_omitted_singular_value",
    "generic_uniform_rank",
    "ntk_existence_rank",
    "ntk_landscape_rank",
    "padded_factorization",
    "partition_covers",
    "product_gap",
    "telescoping_terms",
    "transformer_rank_threshold",
    "truncation_residuals",
    "uniform_partition_rank",
]

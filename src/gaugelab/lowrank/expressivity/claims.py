"""The six coordinates every expressivity claim declares (seed 003 §0x0AA), one record per
ledger of :mod:`gaugelab.lowrank.expressivity.ledgers`. Private; re-exported there."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CLAIMS", "TheoremClaim"]


@dataclass(frozen=True)
class TheoremClaim:
    """What a rank statement is about, and what it does not prove (seed 003 §0x0AA).

    Attributes:
        object: one matrix, a product, a ReLU FNN, a Transformer, a linearized loss, a
            trajectory.
        quantifier: "there exists", "for every target", "with probability one", "almost
            every perturbation", or a plain identity.
        architecture: widths, depth, residual path, shapes, biases, targets, nonlinearities.
        optimization: none, GD, second-order stationary points, an optimizer trajectory.
        rank_statement: necessary, sufficient, an upper bound, an approximation tail, or a
            configured width.
        exclusion: the practical conclusion that is not proved.
        source: the seed section and paper.
    """

    object: str
    quantifier: str
    architecture: str
    optimization: str
    rank_statement: str
    exclusion: str
    source: str


CLAIMS: dict[str, TheoremClaim] = {
    "exact_adapter_rank": TheoremClaim(
        "one known additive gap E = W* − W0", "for every E", "one m×n matrix, ΔW = B A",
        "none", "rank(E) is necessary and sufficient for B A = E",
        "that factor training finds such B, A, or that a small weight residual preserves "
        "task behaviour", "seed 003 §0x0AB",
    ),
    "padded_factorization": TheoremClaim(
        "one known gap E", "there exists (a construction)", "one m×n matrix, r ≥ rank(E)",
        "none", "sufficiency of r ≥ rank(E), by construction",
        "that this factorization is the one an optimizer reaches (any GL(r) gauge of it is "
        "equally valid)", "seed 003 §0x0AB",
    ),
    "truncation_residuals": TheoremClaim(
        "one known gap E", "for every E (Eckart–Young)", "one m×n matrix",
        "none (post-hoc approximation)", "approximation tail Σ_{j>r} σ_j²",
        "that training finds the truncation, or that the residual predicts task loss",
        "seed 003 §0x0AB",
    ),
    "telescoping_terms": TheoremClaim(
        "a product of adapted linear maps W_L⋯W_1", "for every update list (an identity)",
        "L linear layers, no nonlinearity", "none",
        "upper bound rank(F_Δ − F_0) ≤ Σ rank(ΔW_ℓ) ≤ L R (a necessary budget)",
        "that every gap of rank ≤ L R can be allocated to layers (that needs Zeng–Lee's "
        "invertibility conditions), or that rank is additive",
        "seed 003 §0x0AC; zeng2024expressive",
    ),
    "product_gap": TheoremClaim(
        "a product of adapted linear maps", "for every update list (a definition)",
        "L square linear layers", "none", "none (the gap whose rank is bounded)",
        "any allocation or rank claim", "seed 003 §0x0AC",
    ),
    "uniform_partition_rank": TheoremClaim(
        "a frozen ReLU FNN adapted to a target FNN", "for every target, under Assumption 1",
        "width D, L_frozen ≥ L_target, bounded input, biases updated, uniform partition",
        "none (existence)", "sufficient R ≥ ⌈max_i rank(E_i) / M⌉",
        "necessity, trainability, or anything for bias-frozen LoRA or pretrained checkpoints",
        "seed 003 §0x0AE; zeng2024expressive",
    ),
    "generic_uniform_rank": TheoremClaim(
        "a random frozen ReLU FNN", "with probability one over continuous random weights",
        "width D, uniform partition with M layers per block, biases updated",
        "none (existence)", "sufficient R ≥ D/M",
        "a frequency claim about pretrained checkpoints, or a recommended sweep endpoint",
        "seed 003 §0x0AE; zeng2024expressive",
    ),
    "partition_covers": TheoremClaim(
        "a frozen ReLU FNN with per-layer ranks", "for every target, under Assumption 1",
        "ordered partition of the frozen layers, biases updated", "none (existence)",
        "sufficient Σ_{ℓ∈P_i} R_ℓ ≥ rank(E_i) for every block",
        "that only the rank sum matters in training (location, conditioning and optimizer "
        "state still differ)", "seed 003 §0x0AF; zeng2024expressive",
    ),
    "first_omitted_singular_value": TheoremClaim(
        "one partition gap E_i", "for every E_i", "the partition block's rank budget",
        "none", "approximation tail ε_i = σ_{ΣR_ℓ+1}(E_i), a local term of a propagated bound",
        "a small final function error (later layers amplify ε_i; β and magnitudes enter), "
        "reachability, or held-out quality", "seed 003 §0x0AG; zeng2024expressive",
    ),
    "transformer_rank_threshold": TheoremClaim(
        "a Transformer adapted to a target Transformer", "for every target, under Assumption 4",
        "same L and D, all weights D×D, MHSA + tokenwise FFN, no skip connections, adapters on "
        "K/Q/V/O, the last FFN matrix and the output matrix, biases updated",
        "none (existence)", "sufficient R ≥ max_i ⌈G_i / 2⌉ (D/2 for random weights)",
        "that D/2 is necessary for pretrained residual LLMs, the best benchmark rank, found by "
        "gradient training, or that smaller ranks cannot solve structured tasks",
        "seed 003 §0x0AH; zeng2024expressive",
    ),
    "ntk_existence_rank": TheoremClaim(
        "the nuclear-norm-regularized linearized full-update loss", "there exists one global "
        "minimizer (if any minimizer exists)", "T stacked weight matrices, N examples, K outputs, "
        "convex C² loss", "none (a property of minimizers)",
        "upper bound s(s+1)/2 ≤ KN on the rank of at least one optimum",
        "that every minimizer is low rank, that the nonlinear full fine-tuning update has that "
        "rank, or that a rank-s factor optimizer reaches it", "seed 003 §0x0AL; jang2024lora",
    ),
    "ntk_landscape_rank": TheoremClaim(
        "the perturbed factorized linearized loss", "almost every nonzero PSD perturbation P",
        "as ntk_existence_rank, factors u [m, r], v [n, r], compatible factor decay",
        "second-order stationary points", "configured width r(r+1)/2 > KN (strict)",
        "the deterministic P = 0, first-order stationary points or stopped checkpoints, the "
        "nonlinear network, or a universal √N rank rule", "seed 003 §0x0AM, §0x0AO; jang2024lora",
    ),
    "complement_recurrence": TheoremClaim(
        "a deep square matrix factorization trajectory", "for the theorem's initialization",
        "W_ℓ ∈ ℝ^{d×d}, rank Φ ≤ r, d − 2r > 0, scaled-orthogonal init, squared loss",
        "gradient descent with optional weight decay",
        "the complement of width d − 2r is one repeated scalar ρ_ℓ(t)",
        "that LoRA with AdamW, cross entropy or standard init follows the same invariant "
        "coordinates", "seed 003 §0x0AQ; yaras2024compressible",
    ),
    "compression_residual": TheoremClaim(
        "a block-diagonal deep factorization", "for the given factors (exact computation)",
        "factors already in the theorem's block basis (U_ℓ = V_ℓ = I)", "none",
        "the dropped complement ‖f − f_C‖_F² (small, not zero)",
        "the source dynamics theorem (this computes one block calculation)",
        "seed 003 §0x0AR; yaras2024compressible",
    ),
    "compression_error_bound": TheoremClaim(
        "the compressed deep factorization", "for every t under the theorem's GD",
        "as complement_recurrence", "gradient descent", "bound m Π ε_ℓ²",
        "anything for BERT-scale adaptation (that observation is empirical, §0x0AS)",
        "seed 003 §0x0AR; yaras2024compressible",
    ),
    "deep_lora_parameters": TheoremClaim(
        "one Deep LoRA adapted matrix", "an identity (a count)",
        "ΔW = L_out (C_L⋯C_1) R_inᵀ", "none", "configured width r and depth L",
        "state equivalence: the deeper graph carries more activations, gradients and "
        "optimizer tensors than vanilla LoRA", "seed 003 §0x0AT; yaras2024compressible",
    ),
}  # fmt: skip
"""Function name → its :class:`TheoremClaim`."""

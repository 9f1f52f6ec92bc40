"""The intrinsic-dimension protocol's configuration: the digits pretrain run and the d90 study.

:class:`DigitsPretrainSpec` is one run: an MLP trained in full on digits 0–4 (the Aghajanyan
setting's pretrained body). :class:`IntrinsicSpec` is the d90 study of one problem, method and
projection family; a run of it holds exactly one trial — the full fine-tuning reference at one
learning rate (``role="full"``), or one ``(d, seed, lr)`` subspace trial (``role="subspace"``) —
with the study-only fields (threshold, aggregator) and the other role's fields at their
defaults, so a trial is the same stored run in every study that asks for it.

Source: seed 003 §0x02F–J (the protocol), §0x02H (what the primary protocol ran);
li2018intrinsic (the MLP from scratch); aghajanyan2021intrinsic (fine-tuning, head inside d).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from gaugelab.study.spec import ExperimentSpec

__all__ = ["PROBLEM_LABELS", "QUICK", "DigitsPretrainSpec", "IntrinsicSpec", "quick_spec"]

PROBLEMS = ("scratch", "finetune", "char")
"""``scratch``: the MLP on all ten digits from its initialization (li2018intrinsic);
``finetune``: the body pretrained on digits 0–4, a new head for 5–9, head inside ``d``
(aghajanyan2021intrinsic); ``char``: a causal character Transformer from its initialization on
tiny-shakespeare, scored by next-character accuracy."""
PROBLEM_LABELS = {
    "scratch": "digits (scratch)",
    "finetune": "digits (finetune 0–4 → 5–9)",
    "char": "tiny-shakespeare (char)",
}
"""How each problem is named in headers and table titles: its data and its setting."""
METHODS = ("did", "said")
FAMILIES = ("dense", "orthonormal", "sparse", "fastfood")
STUDY_ONLY = ("threshold", "threshold_value", "aggregator")
"""Fields that decide the estimate, not a trial: reset in every run's spec."""


class DigitsPretrainSpec(ExperimentSpec):
    """An MLP ``64 → hidden (tanh) → … → k`` trained in full (Adam, minibatches) on some digits.

    Source: docs/commands/intrinsic-dim.md (the protocol).
    """

    kind: ClassVar[str] = "intrinsic-pretrain"

    classes: tuple[int, ...] = Field((0, 1, 2, 3, 4), description="Digits pretrained on.")
    hidden: int = Field(64, ge=1, description="Width of each hidden layer.")
    layers: int = Field(2, ge=1, description="Hidden layers.")
    steps: int = Field(1500, ge=1, description="Adam steps.")
    batch_size: int = Field(64, ge=1, description="Images per minibatch.")
    lr: float = Field(3e-3, gt=0, description="Adam learning rate.")
    init_seed: int = Field(0, description="Seed of the initialization.")
    data_seed: int = Field(0, description="Seed of the minibatch stream.")
    split_seed: int = Field(0, description="Seed of the train/selection/eval split.")

    trainer: ClassVar[str] = "gaugelab.experiments.intrinsic.train:train_pretrain"


class IntrinsicSpec(ExperimentSpec):
    """The d90 study of one problem, method and projection family (see the module docstring).

    Source: seed 003 §0x02J (the pseudocode); docs/commands/intrinsic-dim.md.
    """

    kind: ClassVar[str] = "intrinsic-dim"

    problem: Literal["scratch", "finetune", "char"] = Field(
        "scratch",
        description="scratch (all ten digits), finetune (0–4 pretrained → 5–9) or char (a "
        "character Transformer on tiny-shakespeare, next-character accuracy).",
    )
    method: Literal["did", "said"] = Field("did", description="DID or SAID (scales inside d).")
    family: Literal["dense", "orthonormal", "sparse", "fastfood"] = Field(
        "dense", description="Projection family."
    )
    normalization: str = Field(
        "unit-columns",
        description="Column normalization (unit-columns for every family; fastfood also 1/p).",
    )
    dims: tuple[int, ...] = Field(
        (10, 20, 40, 80, 160, 320, 640), description="The grid of d (total budget)."
    )
    seeds: tuple[int, ...] = Field((0, 1, 2), description="Projection/training seeds.")
    lrs: tuple[float, ...] = Field((1e-2, 3e-2), description="Subspace Adam lrs.")
    full_lrs: tuple[float, ...] = Field((1e-3, 3e-3), description="Full fine-tuning Adam lrs.")
    steps: int = Field(400, ge=1, description="Adam steps per trial.")
    batch_size: int = Field(64, ge=1, description="Images per minibatch.")
    hidden: int = Field(
        64, ge=2, description="Width of each hidden layer (scratch); d_model (char, even)."
    )
    layers: int = Field(2, ge=1, description="Hidden layers (scratch); blocks (char).")
    init_seed: int = Field(0, description="Seed of θ₀ (scratch) or of the new head (finetune).")
    split_seed: int = Field(0, description="Seed of the train/selection/eval split.")
    pretrain: DigitsPretrainSpec = Field(
        default_factory=DigitsPretrainSpec, description="The pretrain run (finetune only)."
    )
    threshold: Literal["historical", "normalized-gain"] = Field(
        "historical", description="historical (ratio · S_full) or normalized-gain (G_d ≥ τ)."
    )
    threshold_value: float = Field(0.9, gt=0, le=1, description="The ratio or τ.")
    aggregator: Literal["median", "mean", "min"] = Field("median", description="Seed aggregator.")
    dtype: Literal["float32", "float64"] = Field("float32", description="Compute dtype.")
    role: Literal["study", "full", "subspace"] = Field(
        "study", description="study (the declaration) or one run's trial (set by plan)."
    )

    @field_validator("dims", "seeds", "lrs", "full_lrs")
    @classmethod
    def _distinct(cls, values: tuple[Any, ...]) -> tuple[Any, ...]:
        if len(set(values)) != len(values):
            raise ValueError(f"{list(values)} repeats a value")
        return values

    @model_validator(mode="after")
    def _check(self) -> IntrinsicSpec:
        if self.role != "full" and (not self.dims or not self.seeds or not self.lrs):
            raise ValueError("IntrinsicSpec: dims, seeds and lrs need at least one value each")
        if not self.full_lrs:
            raise ValueError("IntrinsicSpec: full_lrs is empty; allowed: at least one rate > 0")
        for name, bad, allowed in (
            ("dims", [d for d in self.dims if d < 1], "integers >= 1"),
            ("lrs", [lr for lr in self.lrs if not lr > 0], "rates > 0"),
            ("full_lrs", [lr for lr in self.full_lrs if not lr > 0], "rates > 0"),
        ):
            if bad:  # the first offending value, as typed (%g), so the CLI can name its option
                raise ValueError(f"IntrinsicSpec: {name}={bad[0]:g}; allowed: {allowed}")
        allowed = ("unit-columns", "1/p") if self.family == "fastfood" else ("unit-columns",)
        if self.family == "orthonormal":
            allowed = ("qr",)
        if self.normalization not in allowed:
            raise ValueError(
                f"IntrinsicSpec: normalization={self.normalization!r} for family "
                f"{self.family!r}; allowed: {', '.join(allowed)}"
            )
        if self.problem == "char" and self.hidden % 2:
            raise ValueError(
                f"IntrinsicSpec: hidden={self.hidden}; allowed: an even integer >= 2 with "
                "problem char (d_model is split over two attention heads)"
            )
        if self.role == "subspace" and (len(self.dims), len(self.seeds), len(self.lrs)) != (1,) * 3:
            raise ValueError("IntrinsicSpec: a subspace run holds one d, one seed and one lr")
        if self.role == "full" and len(self.full_lrs) != 1:
            raise ValueError("IntrinsicSpec: a full run holds one full_lr")
        return self

    def run_label(self) -> str:
        """What a run trains, in progress lines, the report and ``gaugelab runs list``:
        ``full lr=0.003`` or ``did d=32 seed=1 lr=0.01``.

        Raises:
            ValueError: a study spec (``role="study"``), which trains nothing itself.
        """
        if self.role == "full":
            return f"full lr={self.full_lrs[0]:g}"
        if self.role == "subspace":
            return f"{self.method} d={self.dims[0]} seed={self.seeds[0]} lr={self.lrs[0]:g}"
        raise ValueError("IntrinsicSpec.run_label: a study spec trains nothing itself")

    def seed_roles(self) -> dict[str, int]:
        roles = {f"seed[{i}]": s for i, s in enumerate(self.seeds)}
        roles.update(init_seed=self.init_seed, split_seed=self.split_seed)
        if self.problem == "finetune":
            roles.update(
                pretrain_init_seed=self.pretrain.init_seed,
                pretrain_data_seed=self.pretrain.data_seed,
            )
        return dict(sorted(roles.items()))

    trainer: ClassVar[str] = "gaugelab.experiments.intrinsic.train:train_trial"


QUICK: dict[str, Any] = {
    "dims": (8, 32),
    "seeds": (0, 1),
    "lrs": (3e-2,),
    "full_lrs": (3e-3,),
    "steps": 40,
    "hidden": 16,
    "batch_size": 32,
    "pretrain": {"hidden": 16, "steps": 60, "batch_size": 32},
}
"""The ``--quick`` look (seconds)."""


def quick_spec(**overrides: Any) -> IntrinsicSpec:
    """The ``--quick`` look; ``overrides`` are further :class:`IntrinsicSpec` fields (a
    ``pretrain`` mapping is merged into the quick pretrain's)."""
    pretrain = {**QUICK["pretrain"], **dict(overrides.pop("pretrain", {}))}
    fields = {k: v for k, v in QUICK.items() if k != "pretrain"}
    return IntrinsicSpec(pretrain=DigitsPretrainSpec(**pretrain), **{**fields, **overrides})

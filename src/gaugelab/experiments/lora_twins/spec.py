"""The LoRA twin protocol's configuration: one optimizer's twin run on the character model.

:class:`LoraTwinSpec` is one run: the pretrain run of the LoRA protocol (its spec embedded, so
its identity is part of the run's), a LoRA adapter of rank ``rank`` warmed up for
``warmup_steps`` AdamW steps on the target domain (``B = 0`` at initialisation hides the gauge:
every twin of a zero ``B`` is the base), then the base adapter and its twins trained as one
ensemble with ``optimizer`` from a zero optimizer state. Every default is the protocol of
docs/commands/lora-twins.md (about ten minutes on two cores for the five twin runs, plus the
pretrain run of ``lora finetune`` when the store lacks it). A twin run writes no checkpoint:
one interrupted starts again from step 0.

Source: singh2026lossbasis, §6 (the twin triplet); seed 000, Example 3.7 and seed 003 §0x08
(the LoRA gauge ``(B G, G⁻¹ A)``, the scalar gauge ``(c B, A/c)`` and its learning-rate
compensation ``(c² η_B, η_A / c²)``).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from gaugelab.experiments.lora.spec import (
    ALL_TARGETS,
    LORA_LR,
    QUICK,
    PretrainSpec,
    check_lora_rank,
    resolve_targets,
)
from gaugelab.study.spec import ExperimentSpec

__all__ = [
    "DEFAULT_LR",
    "LORA_TWIN_OPTIMIZERS",
    "QUICK_TWINS",
    "TWIN_NAMES",
    "LoraTwinSpec",
    "quick_twin_spec",
]

LORA_TWIN_OPTIMIZERS: tuple[str, ...] = (
    "adam",
    "sgd",
    "sgd-compensated",
    "scaled-gd",
    "scalar-adam",
)
"""The protocol's optimizers: zoo ``adam``, ``gd`` (as ``sgd``), ``gd`` with the scalar twin's
compensated per-factor rates ``(c² η_B, η_A / c²)``, undamped ``scaled-gd`` in the LoRA layout,
and ``scalar-adam`` (one pooled second moment per member over every factor)."""

DEFAULT_LR: dict[str, float] = {
    "adam": LORA_LR,
    "sgd": 0.2,
    "sgd-compensated": 0.2,
    "scaled-gd": 0.05,
    "scalar-adam": LORA_LR,
}
"""The protocol's learning rate of each optimizer (ours: on the default model the base adapter's
target validation loss falls over the twin phase at each; SGD at 0.5 overshot at step 2).
:func:`gaugelab.experiments.lora_twins.run.plan` writes it into every run's spec, so a run's
identity names the rate it trained with."""

TWIN_NAMES: tuple[str, ...] = ("base", "gauge", "scalar", "identity", "noise")
"""The members, in ensemble order: the base adapter; the GL(r) gauge twin ``(B G, G⁻¹ A)``; the
scalar twin ``(c B, A / c)``; the identity twin (``G = I`` through the same arithmetic); the noise
twin (``A, B += noise_scale · randn``)."""

QUICK_TWINS: dict[str, Any] = {
    "warmup_steps": 5,
    "steps": 6,
    "checkpoints": (0, 1, 2, 6),
    "batch_size": 8,
    "val_windows": 16,
}
"""Overrides of the ``--quick`` look (with the LoRA protocol's quick pretrain)."""


class LoraTwinSpec(ExperimentSpec):
    """One LoRA twin run: warm up an adapter, build its twins, train them together.

    Every member sees the same minibatches of the target domain; the loss is the sum of the
    members' mean cross-entropies, so members never interact. At every checkpoint each twin is
    compared with the base: relative distance of the validation logits, relative distance of
    the updates ``s·B A`` (all modules together), and the largest principal angle between the
    twin's and the base's update subspaces (row and column spaces, every module).

    Source: singh2026lossbasis, §6; seed 003 §0x08 (LoRA gauge and scalar gauge);
    zhang2024riemannian (scaled-gd on LoRA factors).
    """

    kind: ClassVar[str] = "lora-twins"

    pretrain: PretrainSpec = Field(
        default_factory=PretrainSpec, description="The pretrain run the adapter starts from."
    )
    optimizer: str = Field("adam", description="The twin phase's optimizer (LORA_TWIN_OPTIMIZERS).")
    lr: float | None = Field(None, description="Its learning rate (default: DEFAULT_LR).")
    damping: float | Literal["auto"] = Field(
        0.0, description="scaled-gd's damping: 0 (undamped, GL-equivariant) or 'auto'/λ ≥ 0."
    )
    rank: int = Field(4, ge=1, description="LoRA rank r.")
    alpha_ratio: float = Field(2.0, gt=0, description="lora_alpha = alpha_ratio · r.")
    rslora: bool = Field(False, description="rsLoRA scale α/√r instead of α/r.")
    targets: tuple[str, ...] = Field(ALL_TARGETS, description="Projections LoRA adapts.")
    adapter_seed: int = Field(
        0,
        description="Seed of the LoRA initialisation: peft-default, PEFT's default start "
        "(A Kaiming-uniform, B = 0).",
    )
    warmup_steps: int = Field(
        20, ge=1, description="AdamW steps before the twins are built (a nonzero B)."
    )
    warmup_lr: float = Field(LORA_LR, description="AdamW learning rate of the warm-up.")
    steps: int = Field(50, ge=1, description="Steps of the twin phase.")
    checkpoints: tuple[int, ...] = Field(
        (0, 1, 2, 5, 10, 20, 50), description="Twin-phase steps at which the twins are measured."
    )
    batch_size: int = Field(16, ge=1, description="Windows per training minibatch.")
    val_windows: int = Field(
        64, ge=1, description="Target validation windows the logit distance is measured on."
    )
    data_seed: int = Field(0, description="Seed of the minibatch stream (warm-up, then twins).")
    gauge_seed: int = Field(0, description="Seed of the GL(r) elements (one per module).")
    scalar: float = Field(2.0, description="c of the scalar twin (cB, A/c); 2: exact.")
    noise_seed: int = Field(0, description="Seed of the noise twin's perturbation.")
    noise_scale: float = Field(1e-7, description="Noise twin: A, B += scale · randn.")

    @field_validator("optimizer")
    @classmethod
    def _known(cls, name: str) -> str:
        if name not in LORA_TWIN_OPTIMIZERS:
            raise ValueError(f"optimizer={name!r}; allowed: {', '.join(LORA_TWIN_OPTIMIZERS)}")
        return name

    @field_validator("lr", "warmup_lr", "scalar", "noise_scale")
    @classmethod
    def _finite(cls, value: float | None, info: Any) -> float | None:
        if value is not None and not (math.isfinite(value) and value > 0):
            raise ValueError(f"{info.field_name}={value!r}; allowed: a finite number > 0")
        return value

    @field_validator("damping")
    @classmethod
    def _damping(cls, value: float | str) -> float | str:
        if value != "auto" and not float(value) >= 0:
            raise ValueError(f"damping={value!r}; allowed: 'auto' or a number >= 0")
        return value

    @model_validator(mode="after")
    def _check(self) -> LoraTwinSpec:
        if resolve_targets(self.targets) != tuple(self.targets):
            raise ValueError(
                f"LoraTwinSpec: targets={list(self.targets)}; allowed: module names of "
                f"{', '.join(ALL_TARGETS)}, each once, in that order (resolve_targets)"
            )
        bad = [s for s in self.checkpoints if not 0 <= s <= self.steps]
        if bad or list(self.checkpoints) != sorted(set(self.checkpoints)):
            raise ValueError(
                f"LoraTwinSpec: checkpoints={list(self.checkpoints)}; allowed: increasing steps "
                f"in [0, steps={self.steps}]"
            )
        if 1 not in self.checkpoints:
            raise ValueError("LoraTwinSpec: checkpoints must include step 1 (the triplet reads it)")
        check_lora_rank(self.pretrain, self.targets, (self.rank,), "rank")
        return self

    def learning_rate(self) -> float:
        """The twin phase's learning rate: ``lr``, or the optimizer's :data:`DEFAULT_LR`."""
        return float(self.lr) if self.lr is not None else DEFAULT_LR[self.optimizer]


    def alpha(self) -> float:
        """``lora_alpha = alpha_ratio · r``."""
        return self.alpha_ratio * self.rank

    def seed_roles(self) -> dict[str, int]:
        return self.pretrain.with_seed_roles(super().seed_roles())

    def dtype_name(self) -> str:
        return self.pretrain.dtype

    trainer: ClassVar[str] = "gaugelab.experiments.lora_twins.train:train_lora_twins"


def quick_twin_spec(**overrides: Any) -> LoraTwinSpec:
    """The ``--quick`` look: the LoRA protocol's quick pretrain (2 layers, d_model 32, 30 steps),
    5 warm-up and 6 twin steps on small batches (seconds); ``overrides`` are further
    :class:`LoraTwinSpec` fields (a ``pretrain`` mapping is merged into the quick pretrain's)."""
    pretrain = {**QUICK["pretrain"], **dict(overrides.pop("pretrain", {}))}
    return LoraTwinSpec(pretrain=PretrainSpec(**pretrain), **{**QUICK_TWINS, **overrides})

"""The kernel-diagnostics protocol's configuration: the three matched LoRA paths.

:class:`KernelSpec` is the study of seed 003 §0x09L on the LoRA protocol's character model
(the pretrain run of :class:`gaugelab.experiments.lora.run.PretrainSpec`, fine-tuned on the target
domain): per optimizer one run, in which every path trains on the *same* minibatch at every
step (one stream), for the same steps, and is diagnosed at the same checkpoints on the same
frozen probe set. The paths:

- ``nonlinear``: LoRA with both factors trained;
- ``linearized``: the initialization-linearized LoRA model ``F_0 + J_0 δ`` (``δ`` shaped as
  the factors), trained by the same optimizer;
- ``fixed-features``: the fixed-random-feature path, the initially nonzero factor (``A``)
  frozen, the other trained;
- ``full`` (optional): full fine-tuning of every base weight.

The adapter starts at ``init="peft-default"`` (PEFT's default: A Kaiming-uniform, B = 0;
:func:`gaugelab.models._lora_init.init_factors`), seeded by ``seed``.

Every default fits, for both optimizers, in about ten minutes on two cores.

Source: seed 003 §0x09J–0x09L; malladi2023kernel (the linearized comparison, SGD vs Adam).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

from pydantic import Field, field_validator, model_validator

from gaugelab.experiments.lora.spec import (
    ALL_TARGETS,
    QUICK,
    PretrainSpec,
    check_lora_rank,
    resolve_targets,
)
from gaugelab.study.spec import ExperimentSpec

PATHS: tuple[str, ...] = ("nonlinear", "linearized", "fixed-features", "full")
"""The matched paths, in report order (``full`` only with ``full=True``)."""
OPTIMIZERS: dict[str, str] = {"gd": "identity", "adam": "adam step t"}
"""The optimizers a kernel run accepts (zoo names) → the metric its kernels use: plain SGD
(``gd``) the identity, Adam its preconditioner at the checkpoint (a declared approximation,
:func:`gaugelab.lowrank.kernels.explanation.adam_metric`)."""
LR: dict[str, float] = {"gd": 0.1, "adam": 2e-3}
"""The protocol's learning rates (ours, chosen on the default corpus; constant)."""
QUICK_KERNEL: dict[str, Any] = {"steps": 6, "batch_size": 4, "checkpoints": (0, 3, 6),
                                "probe_examples": 4, "probes": 2, "val_batches": 1}  # fmt: skip
"""Overrides of the ``--quick`` look (seconds; for tests and docs)."""


class KernelSpec(ExperimentSpec):
    """The three matched LoRA paths under each optimizer, diagnosed at every checkpoint.

    A run of this spec holds exactly one optimizer (:func:`gaugelab.experiments.lora_kernel.run
    .plan` makes one run per optimizer). All paths start from the pretrain run's weights and
    the same LoRA factors (``seed``), train on one minibatch stream (``seed``) with a constant
    rate, and are measured at ``checkpoints`` on ``probe_examples`` windows of the target
    validation split (``probe_seed``): outputs are the last position's logits, stacked example
    then output, dropout off.

    Source: seed 003 §0x09J–0x09L; docs/commands/lora-kernel.md (the protocol).
    """

    kind: ClassVar[str] = "lora-kernel"

    pretrain: PretrainSpec = Field(
        default_factory=PretrainSpec, description="The pretrain run every path starts from."
    )
    optimizers: tuple[str, ...] = Field(
        ("gd", "adam"), description="Zoo optimizers, one run each: gd (plain SGD), adam."
    )
    full: bool = Field(False, description="Add the full fine-tuning path.")
    rank: int = Field(4, ge=1, description="LoRA rank r.")
    alpha_ratio: float = Field(2.0, gt=0, description="lora_alpha = alpha_ratio · r (α = 2r).")
    targets: tuple[str, ...] = Field(
        ALL_TARGETS, description="Projections LoRA adapts in every block (module names)."
    )
    seed: int = Field(0, description="Seed of the LoRA factors and of the minibatch stream.")
    gd_lr: float = Field(LR["gd"], description="Learning rate of gd (every path), finite > 0.")
    adam_lr: float = Field(
        LR["adam"], description="Learning rate of adam (every path), finite > 0."
    )
    steps: int = Field(200, ge=1, description="Fine-tuning steps of every path.")
    batch_size: int = Field(8, ge=1, description="Windows per training minibatch.")
    checkpoints: tuple[int, ...] = Field(
        (0, 5, 10, 25, 50, 100, 200), description="Steps at which every path is diagnosed."
    )
    probe_examples: int = Field(16, ge=1, description="Probe windows N (target validation).")
    probe_seed: int = Field(99, description="Seed of the probe windows' draw.")
    probes: int = Field(8, ge=2, description="Output probes Q of the drift estimators.")
    estimator_seed: int = Field(0, description="Seed of the output probes z_q (Rademacher).")
    val_batches: int = Field(
        2, ge=1, description="Validation batches per domain (the pretrain's fixed ones)."
    )

    @field_validator("optimizers")
    @classmethod
    def _known(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        bad = [v for v in values if v not in OPTIMIZERS]
        if bad or not values or len(set(values)) != len(values):
            raise ValueError(
                f"optimizers={list(values)}; allowed: distinct names of {', '.join(OPTIMIZERS)}"
            )
        return values

    @field_validator("gd_lr", "adam_lr")
    @classmethod
    def _rate(cls, value: float, info: Any) -> float:
        if not (math.isfinite(value) and value > 0):  # checked before any run trains
            raise ValueError(f"{info.field_name}={value!r}; allowed: a finite number > 0")
        return value

    @model_validator(mode="after")
    def _check(self) -> KernelSpec:
        marks = list(self.checkpoints)
        if not marks or marks[0] != 0 or marks != sorted(set(marks)) or marks[-1] > self.steps:
            raise ValueError(
                f"KernelSpec: checkpoints={marks}; allowed: increasing steps from 0 to "
                f"steps={self.steps}"
            )
        if self.val_batches > self.pretrain.val_batches:
            raise ValueError(
                f"KernelSpec: val_batches={self.val_batches}; allowed: <= the pretrain's "
                f"val_batches={self.pretrain.val_batches}"
            )
        if resolve_targets(self.targets) != tuple(self.targets):
            raise ValueError(
                f"KernelSpec: targets={list(self.targets)}; allowed: module names of "
                f"{', '.join(ALL_TARGETS)}, each once, in that order"
            )
        check_lora_rank(self.pretrain, self.targets, (self.rank,), "rank")
        return self


    def paths(self) -> list[str]:
        """The paths of every run: the three matched ones, then ``full`` if asked."""
        return [p for p in PATHS if p != "full" or self.full]

    @property
    def optimizer(self) -> str:
        """The optimizer of a run spec (one optimizer).

        Raises:
            ValueError: the spec holds several (a study spec, not a run's).
        """
        if len(self.optimizers) != 1:
            raise ValueError(
                f"KernelSpec: optimizers={list(self.optimizers)}; a run holds one (plan(spec))"
            )
        return self.optimizers[0]

    def lr(self, optimizer: str) -> float:
        """The learning rate of ``optimizer`` (every path)."""
        return self.gd_lr if optimizer == "gd" else self.adam_lr

    def seed_roles(self) -> dict[str, int]:
        return self.pretrain.with_seed_roles(super().seed_roles())

    def dtype_name(self) -> str:
        return self.pretrain.dtype

    trainer: ClassVar[str] = "gaugelab.experiments.lora_kernel.train:train_paths"


def quick_spec(**overrides: Any) -> KernelSpec:
    """The ``--quick`` look: the quick pretrain of ``gaugelab lora finetune --quick``, 6 steps
    per path, checkpoints 0, 3, 6, 4 probe windows, Q = 2 (seconds); ``overrides`` are further
    :class:`KernelSpec` fields (a ``pretrain`` mapping is merged into the quick pretrain's)."""
    pretrain = {**QUICK["pretrain"], **dict(overrides.pop("pretrain", {}))}
    return KernelSpec(pretrain=PretrainSpec(**pretrain), **{**QUICK_KERNEL, **overrides})

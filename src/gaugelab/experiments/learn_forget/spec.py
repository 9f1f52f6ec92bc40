"""The learning–forgetting study's declaration: candidates, blocks, nuisance, checkpoints, gates.

:class:`LearnForgetSpec` is the whole study, declared before any outcome: the fine-tuning
protocol of :class:`~gaugelab.experiments.lora.run.FinetuneSpec` (its pretrain, optimizer,
schedule and data budget), the candidate family (full fine-tuning, LoRA at each rank, rsLoRA at
the largest), the paired seeds, the declared checkpoints, the stress domain (a held-out
standard-library package), an optional second target block, and the product gates with their
tie-break. A run of it is one (block, candidate) cell, training every seed as one ensemble;
:func:`gaugelab.experiments.learn_forget.run.plan` makes them with the fields a run does not read
(gates, the other block) reset to their defaults, so a changed gate is a new study without new
training.

Source: biderman2024lora (full fine-tuning against LoRA, learning against forgetting, α = 2r);
seed 003 §0x0BG (the immutable run manifest), §0x0BQ (gates and tie-break), §0x0CE (units,
blocks, nuisance tuples), §0x0CJ (the design manifest).
"""

from __future__ import annotations

import itertools
from typing import Any, ClassVar

from pydantic import Field, field_validator, model_validator

from gaugelab.experiments.lora.spec import QUICK, FinetuneSpec, PretrainSpec
from gaugelab.study.spec import ExperimentSpec
from gaugelab.tasks import TwoDomainSpec
from gaugelab.tasks.sources import stdlib_source

__all__ = [
    "STRESS_FILES",
    "LearnForgetSpec",
    "candidate_id",
    "default_finetune",
    "default_stress",
    "quick_spec",
]

STRESS_FILES: tuple[str, ...] = (
    "email/_header_value_parser.py",
    "email/_parseaddr.py",
    "email/_policybase.py",
    "email/base64mime.py",
    "email/charset.py",
    "email/contentmanager.py",
    "email/encoders.py",
    "email/feedparser.py",
    "email/generator.py",
    "email/header.py",
    "email/headerregistry.py",
    "email/message.py",
    "email/parser.py",
    "email/policy.py",
    "email/quoprimime.py",
    "email/utils.py",
)
"""The stress domain: the ``email`` package of the standard library (16 modules, sorted; in
every CPython from 3.11 on), held out of the target domain
:data:`gaugelab.tasks.sources.STDLIB_FILES`: Python source the candidates never train on."""

BLOCKS = ("a", "b")
"""Block names: ``a`` the target domain of the fine-tuning protocol; ``b`` the optional second
target (``second_target``)."""


def candidate_id(method: str, rank: int | None) -> str:
    """``full``, ``lora-r<r>`` or ``rslora-r<r>``."""
    return "full" if method == "full" else f"{method}-r{rank}"


def default_finetune() -> FinetuneSpec:
    """The study's fine-tuning protocol: :class:`FinetuneSpec` (the LoRA protocol: 800 steps,
    AdamW, α = 2r) with ranks 1, 2, 4, 8, 16 and seeds 0 and 1 (paired: every candidate
    trains both)."""
    return FinetuneSpec(ranks=(1, 2, 4, 8, 16), seeds=(0, 1))


def default_stress(pretrain: PretrainSpec | None = None) -> TwoDomainSpec:
    """The stress corpus: the pretrain corpus with :data:`STRESS_FILES` as its target."""
    return (pretrain or PretrainSpec()).corpus.with_target(stdlib_source(STRESS_FILES))


class LearnForgetSpec(ExperimentSpec):
    """The learning–forgetting rank study (see the module docstring).

    Gates are on the oriented validation scale (nats per character, higher is better after
    orientation): ``target_gain = L_0 − L_i`` on the target domain, ``forgetting = L_i − L_0``
    on the retention domain, ``stress_gain = L_0 − L_i`` on the stress domain; the reference
    ``0`` is the pretrained model (the base candidate, evaluated once per block). The selected
    candidate is the feasible one of least cost (trainable parameters), then smallest
    configured rank (full fine-tuning: ∞), then candidate id.

    Source: biderman2024lora; seed 003 §0x0BB, §0x0BG, §0x0BI, §0x0BQ, §0x0CE–0x0CJ.
    """

    kind: ClassVar[str] = "learn-forget"

    finetune: FinetuneSpec = Field(
        default_factory=default_finetune,
        description="The fine-tuning protocol (pretrain, optimizer, schedule, steps, seeds, "
        "targets); its full/ranks are the candidate family.",
    )
    rslora_rank: int | None = Field(
        16, ge=1, description="Add rsLoRA (scale α/√r) at this rank; None: no rsLoRA candidate."
    )
    stress: TwoDomainSpec = Field(
        default_factory=default_stress,
        description="The stress corpus: its target domain (default the stdlib email package) is "
        "held out of training; validation and test splits are used.",
    )
    second_target: TwoDomainSpec | None = Field(
        None, description="A second target block (b): another target domain, same retention."
    )
    checkpoints: tuple[int, ...] | None = Field(
        None,
        description="Declared checkpoint steps (validation-selected); default the quarters of "
        "the fine-tuning steps.",
    )
    min_target_gain: float = Field(
        0.5, description="Gate: target gain ≥ this (nats/char)."
    )
    max_forgetting: float = Field(
        0.3, description="Gate: forgetting ≤ this (nats/char)."
    )
    min_stress_gain: float = Field(
        0.0, description="Gate: stress gain ≥ this (nats/char)."
    )
    max_tail: float | None = Field(
        None,
        ge=0,
        le=1,
        description="Gate: relative energy tail of the full update at the candidate's rank ≤ "
        "this (a gate, never the objective); None: reported, not gated.",
    )
    candidate: str | None = Field(
        None, description="A run's candidate id (set by plan; None for the study)."
    )
    block: str = Field("a", description="A run's block (set by plan).")

    @field_validator("checkpoints")
    @classmethod
    def _increasing(cls, steps: tuple[int, ...] | None) -> tuple[int, ...] | None:
        if steps is not None and (
            not steps or steps[0] < 1 or any(b <= a for a, b in itertools.pairwise(steps))
        ):
            raise ValueError(f"checkpoints={list(steps)}; allowed: increasing steps ≥ 1")
        return steps

    @model_validator(mode="after")
    def _check(self) -> LearnForgetSpec:
        ft = self.finetune
        steps = self.checkpoint_steps()
        if steps[-1] > ft.steps:
            raise ValueError(
                f"LearnForgetSpec: checkpoints={list(steps)}; allowed: steps in 1..{ft.steps} "
                "(the fine-tuning steps)"
            )
        unevaluated = [s for s in steps if s % ft.eval_every and s != ft.steps]
        if unevaluated:
            raise ValueError(
                f"LearnForgetSpec: checkpoints={unevaluated} are not validation steps; allowed: "
                f"multiples of the validation cadence {ft.eval_every}, or the last step {ft.steps}"
            )
        negative = [s for s in ft.seeds if s < 0]
        if negative:
            raise ValueError(
                f"LearnForgetSpec: seeds={list(ft.seeds)}; allowed: integers >= 0 (each names a "
                "nuisance tuple of the design)"
            )
        if self.block not in BLOCKS:
            raise ValueError(f"LearnForgetSpec: block={self.block!r}; allowed: a, b")
        if self.block == "b" and self.second_target is None:
            raise ValueError("LearnForgetSpec: block='b' needs second_target")
        if self.candidate is not None and self.candidate not in self.candidate_ids():
            raise ValueError(
                f"LearnForgetSpec: candidate={self.candidate!r}; allowed: "
                f"{', '.join(self.candidate_ids())}"
            )
        base = ft.pretrain.corpus
        for name, other in (("stress", self.stress), ("second_target", self.second_target)):
            if other is None:
                continue
            differ = base.differs_beyond_target(other)
            if differ:
                raise ValueError(
                    f"LearnForgetSpec: {name} differs from the pretrain corpus in {differ}; "
                    "allowed: another target domain only"
                )
        trained = {f.sha256 for f in (ft.target_corpus or base).target.files}
        if self.second_target is not None:
            trained |= {f.sha256 for f in self.second_target.target.files}
        shared = sorted(f.path for f in self.stress.target.files if f.sha256 in trained)
        if shared:  # byte-identical files, wherever they were read from
            raise ValueError(
                f"LearnForgetSpec: the stress domain shares {shared} with a target domain; "
                "allowed: held-out files only"
            )
        return self

    def checkpoint_steps(self) -> tuple[int, ...]:
        """The declared checkpoints (default: the quarters of ``finetune.steps``, each rounded
        down to a validation step, and the last step)."""
        if self.checkpoints is not None:
            return self.checkpoints
        n, every = self.finetune.steps, self.finetune.eval_every
        quarters = {max(every, (n * q // 4) // every * every) for q in (1, 2, 3)}
        return tuple(sorted({s for s in quarters if s < n} | {n}))

    def methods(self) -> list[tuple[str, int | None]]:
        """``(method, rank)`` of every candidate: full, LoRA per rank, rsLoRA."""
        out: list[tuple[str, int | None]] = [("full", None)] if self.finetune.full else []
        out += [("lora", r) for r in self.finetune.ranks]
        if self.rslora_rank is not None:
            out.append(("rslora", self.rslora_rank))
        return out

    def candidate_ids(self) -> list[str]:
        """The candidates' ids in declaration order."""
        return [candidate_id(m, r) for m, r in self.methods()]

    def candidate_method(self) -> tuple[str, int | None]:
        """``(method, rank)`` of a run's candidate.

        Raises:
            ValueError: the spec is a study's (no ``candidate``).
        """
        if self.candidate is None:
            raise ValueError("LearnForgetSpec: a study spec has no run candidate (plan(spec))")
        return dict(zip(self.candidate_ids(), self.methods(), strict=True))[self.candidate]

    def block_corpus(self, block: str | None = None) -> TwoDomainSpec:
        """The two-domain corpus of ``block`` (default: the run's): block ``b`` the second
        target, block ``a`` the fine-tuning protocol's target corpus (or the pretrain's)."""
        if (block or self.block) == "b":
            if self.second_target is None:
                raise ValueError("LearnForgetSpec: block 'b' needs second_target")
            return self.second_target
        return self.finetune.target_corpus or self.finetune.pretrain.corpus

    def blocks(self) -> tuple[str, ...]:
        """``("a",)`` or ``("a", "b")``."""
        return BLOCKS if self.second_target is not None else BLOCKS[:1]

    def run_finetune(self) -> FinetuneSpec:
        """The :class:`FinetuneSpec` a run trains (its one candidate, its block's target).

        Raises:
            ValueError: the spec is a study's (no ``candidate``).
        """
        method, rank = self.candidate_method()
        data = self.finetune.spec_dict()
        data.update(
            full=method == "full", ranks=[] if rank is None else [rank], rslora=method == "rslora"
        )
        if self.block == "b":
            data["target_corpus"] = self.block_corpus().model_dump(mode="json")
        return FinetuneSpec.model_validate(data)

    def seed_roles(self) -> dict[str, int]:
        return self.finetune.seed_roles()

    def dtype_name(self) -> str:
        return self.finetune.dtype_name()

    trainer: ClassVar[str] = "gaugelab.experiments.learn_forget.train:train_cell"


def quick_spec(**overrides: Any) -> LearnForgetSpec:
    """The ``--quick`` look (seconds): the LoRA protocol's quick model and schedule, ranks 1
    and 4, rsLoRA at 4, seeds 0 and 1, checkpoints at steps 10 and 20."""
    ft = {**{k: v for k, v in QUICK.items() if k != "pretrain"}, "ranks": (1, 4), "seeds": (0, 1)}
    finetune = FinetuneSpec(pretrain=PretrainSpec(**QUICK["pretrain"]), **ft)
    fields: dict[str, Any] = {
        "finetune": finetune,
        "rslora_rank": 4,
        "checkpoints": (10, 20),
        "stress": default_stress(finetune.pretrain),
    }
    fields.update(overrides)
    return LearnForgetSpec(**fields)

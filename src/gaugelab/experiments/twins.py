"""The attention-head twin protocol: configuration, data, one run in the harness, the study.

:class:`TwinSpec` is one optimizer's twin run with every default of docs/protocols.md §5 (the
model, the modular task, the optimizers' hyperparameters); :func:`run_twins` trains it with the
twin engine (:mod:`gaugelab.equivariance.twins`). The experiment surface (see
:mod:`gaugelab.experiments`): :class:`TwinStudy` (a run in the harness), :func:`plan` (every
optimizer × init/gauge-draw pair), :func:`collect`, :func:`tables`, :func:`report`, and
:func:`run_twins_study` for all of it at once.

Source: singh2026lossbasis, §6 (twin protocol); docs/protocols.md §5 and §6.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator

from gaugelab.equivariance.merge import merge_twin
from gaugelab.equivariance.twins import TwinKind, TwinResult, make_twins, train_twins
from gaugelab.experiments._study import StudyOutcome, run_experiment
from gaugelab.experiments._twins_results import (
    TwinRow,
    TwinsResult,
    collect,
    distance_figure,
    report,
    tables,
)
from gaugelab.models import Ensemble, Transformer, TransformerConfig
from gaugelab.optim import OPTIMIZERS, make_optimizer, muon_hybrid
from gaugelab.study.spec import ExperimentSpec
from gaugelab.study.store import DEFAULT_STORE_PATH
from gaugelab.study.sweep import Sweep
from gaugelab.tasks import TINY_SHAKESPEARE_SHA256, CharText, ModularArithmetic

HYBRID = "muon-hybrid"
DEFAULT_OPTIMIZERS = ("adam", "heavy-ball", "scalar-adam", HYBRID)
# docs/protocols.md §5: adam 1e-3; heavy-ball μ = 0.9, η = 0.5; scalar-adam 3e-3; muon 0.02
# (+ adam 1e-3 elsewhere).
PROTOCOL_HYPER: dict[str, dict[str, float]] = {
    "adam": {"lr": 1e-3},
    "heavy-ball": {"lr": 0.5, "momentum": 0.9},
    "scalar-adam": {"lr": 3e-3},
    HYBRID: {"lr": 0.02, "adam_lr": 1e-3},
}
# The character model (6 layers, d_model 256) diverges under heavy-ball at the modular task's
# η = 0.5 (non-finite by step 20); at 0.1 and 0.03 it stays finite (and, as singh2026lossbasis
# reports for SGD at this depth, near the unigram loss). docs/protocols.md §6.
TEXT_HYPER: dict[str, dict[str, float]] = {
    **PROTOCOL_HYPER,
    "heavy-ball": {"lr": 0.03, "momentum": 0.9},
}
QUICK_STEPS = 100  # the step-1 split and the early drift; about two minutes on 2 cores
QUICK_CHECKPOINTS = (0, 1, 10, 50, 100)


def twin_optimizers() -> list[str]:
    """The names a twin run accepts: every zoo rule, and ``muon-hybrid``."""
    return [*sorted(OPTIMIZERS), HYBRID]


def twin_model_config(**overrides) -> TransformerConfig:
    """The docs/protocols.md §5 model: 2 pre-RMSNorm blocks, 4 heads × 16, d 64, SiLU MLP 256,
    no mask.

    RMSNorm is ``x/‖x‖·√d·g`` (no stabiliser), all projections bias-free, no qk-norm, learned
    positions, torch's default layer initialisation; the head reads the last position.
    """
    base = dict(
        n_layers=2, d_model=64, n_heads=4, d_head=16, d_mlp=256, d_vocab=48, d_vocab_out=47,
        n_ctx=3, act_fn="silu", normalization="rmsnorm", norm_eps=0.0, norm_placement="pre",
        positional="learned", causal=False, init_std=None,
    )  # fmt: skip
    return TransformerConfig(**{**base, **overrides})


def text_model_config(d_vocab: int, block_size: int, **overrides) -> TransformerConfig:
    """The stochastic variant's character model (docs/protocols.md §6): 6 layers, d_model 256,
    8 heads × 32, causal."""
    base = dict(
        n_layers=6, d_model=256, n_heads=8, d_head=32, d_mlp=1024, d_vocab=d_vocab,
        n_ctx=block_size, act_fn="silu", normalization="rmsnorm", norm_eps=1e-6,
        positional="learned", causal=True, init_std=0.02,
    )  # fmt: skip
    return TransformerConfig(**{**base, **overrides})


class TwinSpec(BaseModel):
    """One optimizer's twin run (immutable; its JSON is part of the run's identity).

    Source: singh2026lossbasis, §6; docs/protocols.md §5 (every default).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    kind: ClassVar[str] = "twins"

    model: TransformerConfig = Field(
        default_factory=twin_model_config, description="The Transformer (docs/protocols.md §5)."
    )
    task: Literal["modular", "text"] = Field(
        "modular", description="modular: full-batch addition mod `modulus`; text: characters."
    )
    modulus: int = Field(47, ge=2, description="Prime of the modular task.")
    train_fraction: float = Field(0.4, gt=0, lt=1, description="Train share of the pairs.")
    split_seed: int = Field(42, description="Seed of the random train/validation split.")
    text_path: str | None = Field(
        None, description="UTF-8 text file for task='text'; None: the packaged tiny-shakespeare."
    )
    text_sha256: str | None = Field(
        None, description="sha256 of the text file; part of the identity, checked before training."
    )
    batch_size: int = Field(32, ge=1, description="Minibatch size for task='text'.")
    val_batches: int = Field(4, ge=1, description="Validation batches for task='text'.")
    optimizer: str = Field("adam", description="A zoo rule or 'muon-hybrid'.")
    hyper: dict[str, float | int | bool | str] = Field(
        default_factory=dict, description="Optimizer hyperparameters (§5 defaults if empty)."
    )
    twins: tuple[TwinKind, ...] = Field(
        ("gauge", "identity", "noise"), description="Twins trained beside the base."
    )
    noise_scale: float = Field(1e-7, gt=0, description="Noise twin: W_Q, W_K += scale·randn.")
    init_seed: int = Field(42, description="Seed of the base model's initialisation.")
    gauge_seed: int = Field(777, description="Seed of the gauge draw (one element per head).")
    noise_seed: int = Field(888, description="Seed of the noise twin's perturbation.")
    data_seed: int = Field(0, description="Seed of the minibatch stream (task='text').")
    steps: int = Field(1500, ge=1, description="Training steps.")
    checkpoints: tuple[int, ...] = Field(
        (0, 1, 10, 50, 100, 300, 600, 1000, 1500), description="Steps at which to measure."
    )
    dtype: Literal["float32", "float64"] = Field("float32", description="Parameter dtype.")
    compile: bool = Field(
        False,
        description="Train through torch.compile (about 2× faster on CPU after a one-off "
        "compilation; round-off differs from eager, so it is part of the run's identity).",
    )

    @model_validator(mode="after")
    def _check(self) -> TwinSpec:
        if self.optimizer not in twin_optimizers():
            known = ", ".join(twin_optimizers())
            raise ValueError(f"TwinSpec: optimizer={self.optimizer!r}; allowed: {known}")
        if len(set(self.twins)) != len(self.twins):
            raise ValueError(f"TwinSpec: twins={self.twins!r} repeats a kind")
        return self

    def hyperparameters(self) -> dict:
        """``hyper``, or when empty the docs/protocols.md §5 hyperparameters of the optimizer
        (:data:`TEXT_HYPER` for the text task: heavy-ball at η = 0.03)."""
        if self.hyper:
            return dict(self.hyper)
        defaults = TEXT_HYPER if self.task == "text" else PROTOCOL_HYPER
        return dict(defaults.get(self.optimizer, {}))

    def measured_steps(self) -> list[int]:
        """Checkpoint steps within ``[0, steps]``, plus the final step."""
        return sorted({s for s in self.checkpoints if 0 <= s <= self.steps} | {self.steps})

    def text(self) -> CharText:
        """The text of ``task='text'``: ``text_path``, or the packaged tiny-shakespeare.

        Raises:
            FileNotFoundError, ValueError: from :class:`gaugelab.tasks.CharText`; ValueError
                also when the file's sha256 is not ``text_sha256``.
        """
        n_ctx = self.model.n_ctx
        if self.text_path is None:
            text = CharText.tiny_shakespeare(block_size=n_ctx)
        else:
            text = CharText(self.text_path, block_size=n_ctx)
        if self.text_sha256 is not None and text.sha256 != self.text_sha256:
            raise ValueError(
                f"TwinSpec: {text.path} has sha256 {text.sha256[:12]}…, the spec expects "
                f"{self.text_sha256[:12]}…: the file changed"
            )
        return text


class ModularData:
    """Full-batch modular addition: every step trains on the whole training split."""

    def __init__(self, spec: TwinSpec) -> None:
        task = ModularArithmetic(
            spec.modulus, train_fraction=spec.train_fraction, seed=spec.split_seed
        )
        self.train = (task.train_inputs, task.train_labels)
        self.val = (task.val_inputs, task.val_labels)

    def batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The training split."""
        return self.train

    def skip(self, n: int) -> None:
        """Nothing to skip: every batch is the full split."""

    def logits(self, out: torch.Tensor) -> torch.Tensor:
        """``[E, B, T, V]`` → the last position ``[E, B, V]`` (the answer token)."""
        return out[:, :, -1]

    def labels(self, y: torch.Tensor) -> torch.Tensor:
        """The answers ``[B]``."""
        return y


class TextData:
    """Character windows: one minibatch stream shared by every member, fixed validation batches."""

    def __init__(self, spec: TwinSpec) -> None:
        text = spec.text()
        self.train = None
        self.stream = text.batches(spec.batch_size, seed=spec.data_seed)
        val = text.batches(spec.batch_size, seed=spec.data_seed + 1, split="val")
        xs, ys = zip(*(next(val) for _ in range(spec.val_batches)), strict=True)
        self.val = (torch.cat(xs), torch.cat(ys))

    def batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The next minibatch ``([B, T], [B, T])``."""
        return next(self.stream)

    def skip(self, n: int) -> None:
        """Consume ``n`` minibatches (a resumed run continues the stream)."""
        for _ in range(n):
            next(self.stream)

    def logits(self, out: torch.Tensor) -> torch.Tensor:
        """``[E, B, T, V]`` → every position ``[E, B·T, V]``."""
        return out.flatten(1, 2)

    def labels(self, y: torch.Tensor) -> torch.Tensor:
        """Every next character ``[B·T]``."""
        return y.flatten()


def twin_data(spec: TwinSpec) -> ModularData | TextData:
    """The task of ``spec`` (:class:`ModularData` or :class:`TextData`)."""
    return ModularData(spec) if spec.task == "modular" else TextData(spec)


def build_members(spec: TwinSpec) -> tuple[list[Transformer], list[str]]:
    """The base model (seeded ``init_seed``) and its twins, base first, and their names."""
    base = Transformer(spec.model, seed=spec.init_seed, dtype=getattr(torch, spec.dtype))
    return make_twins(
        base,
        spec.twins,
        gauge_seed=spec.gauge_seed,
        noise_seed=spec.noise_seed,
        noise_scale=spec.noise_scale,
    )


def _optimizer(spec: TwinSpec) -> Callable[[Ensemble], torch.optim.Optimizer]:
    hyper = spec.hyperparameters()

    def build(ensemble: Ensemble) -> torch.optim.Optimizer:
        if spec.optimizer == HYBRID:
            return muon_hybrid(ensemble.stacked_parameters().items(), member_dims=1, **hyper)
        return make_optimizer(spec.optimizer, list(ensemble.parameters()), member_dims=1, **hyper)

    return build


def run_twins(
    spec: TwinSpec,
    sink: Callable[[int, dict[str, float]], None] | None = None,
    progress: Callable[[int], None] | None = None,
    run: Any = None,
) -> TwinResult:
    """Train the base and its twins as one ensemble and measure them at every checkpoint.

    Args:
        spec: the run.
        sink: called as ``sink(step, metrics)`` at every checkpoint (e.g. a run store's logger).
        progress: called with the number of steps done after every step.
        run: a run context: checkpoints at every measured step, resume after an interruption.

    Returns:
        A :class:`gaugelab.equivariance.twins.TwinResult` (``spec`` set).

    Raises:
        NonFiniteError: a loss or gradient became NaN/inf.
        FileNotFoundError, ValueError: the text of ``task='text'`` is missing or changed.

    Source: singh2026lossbasis, §6; docs/protocols.md §5.
    """
    data = twin_data(spec)
    members, names = build_members(spec)
    result = train_twins(
        members,
        names,
        _optimizer(spec),
        data,
        steps=spec.steps,
        checkpoints=spec.measured_steps(),
        compile=spec.compile,
        sink=sink,
        progress=progress,
        run=run,
    )
    result.spec = spec
    return result


class TwinStudy(ExperimentSpec):
    """One twin run in the harness: a :class:`TwinSpec` plus what to do after training.

    Source: singh2026lossbasis, §6; docs/protocols.md §5.
    """

    kind: ClassVar[str] = "twins"
    twin: TwinSpec = Field(default_factory=TwinSpec, description="The twin run.")
    merge: bool = Field(False, description="After training, merge each twin into its base.")

    def seed_roles(self) -> dict[str, int]:
        t = self.twin
        roles = dict(
            init_seed=t.init_seed,
            gauge_seed=t.gauge_seed,
            noise_seed=t.noise_seed,
            data_seed=t.data_seed,
            split_seed=t.split_seed,
        )
        return dict(sorted(roles.items()))

    def dtype_name(self) -> str:
        return self.twin.dtype

    def admit(self) -> None:
        """Reject a run whose text is missing or changed before anything trains.

        Raises:
            ValueError: the text file is missing, unreadable or not the one the spec names.
        """
        if self.twin.task == "text":
            try:
                self.twin.text()
            except FileNotFoundError as exc:
                raise ValueError(str(exc)) from None

    def execute(self, run) -> None:
        """Train (resuming from a checkpoint if one exists), log every checkpoint's metrics,
        store the verdict, then (optionally) merge and log that too."""
        result = run_twins(self.twin, sink=run.log, run=run)
        final = self.twin.steps
        if self.merge:
            data = twin_data(self.twin)
            inputs, labels = data.val
            base = result.members[0]
            merged: dict[str, float] = {}
            for kind, twin in zip(self.twin.twins, result.members[1:], strict=True):
                metrics = merge_twin(
                    base, twin, inputs, labels, last_position=self.twin.task == "modular"
                ).metrics
                merged.update({f"merge/{kind}/{k}": v for k, v in metrics.items()})
            run.log(final + 1, merged)  # a step after training: the merge is post-hoc
        path = run.directory / "summary.json"
        summary = {"verdict": result.verdict, "explanation": result.explanation}
        path.write_text(json.dumps(summary, indent=2))
        run.artifact(path, "summary")


def text_twin(
    path: str | os.PathLike[str] | None = None,
    *,
    steps: int = 300,
    block_size: int = 64,
    **overrides,
) -> TwinSpec:
    """The stochastic variant (docs/protocols.md §6): a 6-layer, d_model 256 character model on
    ``path``, or on the packaged tiny-shakespeare when ``path`` is ``None``.

    Raises:
        FileNotFoundError / ValueError: from :class:`gaugelab.tasks.CharText`.
    """
    if path is None:
        text, text_path = CharText.tiny_shakespeare(block_size=block_size), None
    else:
        text = CharText(path, block_size=block_size)
        text_path = str(Path(path).resolve())
    checkpoints = tuple(s for s in (0, 1, 10, 50, 100, 200, 300, 500, 1000) if s <= steps)
    return TwinSpec(
        task="text",
        text_path=text_path,
        text_sha256=text.sha256 if path is not None else TINY_SHAKESPEARE_SHA256,
        steps=steps,
        checkpoints=checkpoints,
        model=text_model_config(text.d_vocab, block_size),
        **overrides,
    )


def plan(
    optimizers: Sequence[str] = DEFAULT_OPTIMIZERS,
    *,
    base: TwinSpec | None = None,
    pairs: int = 1,
    merge: bool = False,
    name: str | None = None,
) -> Sweep:
    """The sweep of twin runs: every optimizer × ``pairs`` (init seed, gauge draw) pairs.

    Pair ``i`` uses ``init_seed + i`` and ``gauge_seed + i`` (pair 0 is the protocol's). The
    study is named ``twins-<10 hex of the base spec's identity>`` unless ``name`` is given, so
    the same configuration always lands in the same study.

    Raises:
        ValueError: no optimizer, an unknown one, or ``pairs < 1``.
    """
    if not optimizers:
        raise ValueError("plan: optimizers is empty; allowed: zoo rules or 'muon-hybrid'")
    if pairs < 1:
        raise ValueError(f"plan: pairs={pairs}; allowed: an integer >= 1")
    base = base or TwinSpec()
    for opt in optimizers:  # validates every name before anything runs
        TwinSpec.model_validate({**base.model_dump(), "optimizer": opt, "hyper": {}})
    seeds = [
        {"twin.init_seed": base.init_seed + i, "twin.gauge_seed": base.gauge_seed + i}
        for i in range(pairs)
    ]
    study = TwinStudy(twin=base, merge=merge)
    return Sweep(
        study,
        grid={"twin.optimizer": list(optimizers)},
        seeds=seeds,
        name=name or f"twins-{study.identity()[:10]}",
    )


def run_twins_study(
    optimizers: Sequence[str] = DEFAULT_OPTIMIZERS,
    *,
    base: TwinSpec | None = None,
    pairs: int = 1,
    merge: bool = False,
    store: str | os.PathLike[str] = DEFAULT_STORE_PATH,
    executor: str = "local",
    max_workers: int = 1,
    threads: int | None = 1,
    address: str | None = None,
    progress: Callable[[int, int], None] | None = None,
    report_dir: str | os.PathLike[str] | None = None,
    write_report: bool = True,
) -> StudyOutcome[TwinsResult]:
    """Run the twin study (:func:`plan`), collect the table and verdicts, write the report.

    Runs already completed in the store are reused; a run killed mid-way resumes from its
    last checkpoint (every measured step).

    Args:
        optimizers, base, pairs, merge: as :func:`plan`.
        store, executor, max_workers, threads, address, progress, report_dir, write_report: as
            :func:`gaugelab.experiments.zoo.run_zoo` (one torch thread per run by default: the
            model is small, and on a shared machine one thread is several times faster).

    Returns:
        The :class:`~gaugelab.experiments._study.StudyOutcome` of a :class:`TwinsResult`.

    Raises:
        ValueError: bad optimizers, pairs or executor options.

    Source: singh2026lossbasis, §6; docs/protocols.md §5.
    """
    return run_experiment(
        plan(optimizers, base=base, pairs=pairs, merge=merge),
        collect,
        report,
        store=store,
        executor=executor,
        max_workers=max_workers,
        threads=threads,
        address=address,
        progress=progress,
        report_dir=report_dir,
        write_report=write_report,
    )


__all__ = [
    "DEFAULT_OPTIMIZERS",
    "HYBRID",
    "PROTOCOL_HYPER",
    "QUICK_CHECKPOINTS",
    "QUICK_STEPS",
    "TEXT_HYPER",
    "ModularData",
    "TextData",
    "TwinRow",
    "TwinSpec",
    "TwinStudy",
    "TwinsResult",
    "build_members",
    "collect",
    "distance_figure",
    "plan",
    "report",
    "run_twins",
    "run_twins_study",
    "tables",
    "text_model_config",
    "text_twin",
    "twin_data",
    "twin_model_config",
    "twin_optimizers",
]

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

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import torch
from pydantic import Field

from gaugelab.equivariance.merge import merge_twin
from gaugelab.equivariance.twins import TwinResult, make_twins
from gaugelab.experiments.twins.data import ModularData, TextData, twin_data
from gaugelab.experiments.twins.figures import distance_figure
from gaugelab.experiments.twins.hf import check_hf, hf_parts, hf_twin
from gaugelab.experiments.twins.results import TwinRow, TwinsResult, collect
from gaugelab.experiments.twins.spec import (
    DEFAULT_OPTIMIZERS,
    HYBRID,
    PROTOCOL_HYPER,
    QUICK_CHECKPOINTS,
    QUICK_STEPS,
    TEXT_HYPER,
    TwinSpec,
    text_model_config,
    twin_model_config,
    twin_optimizers,
)
from gaugelab.experiments.twins.train import train_twins
from gaugelab.experiments.twins.views import report, tables
from gaugelab.models import Ensemble, Transformer
from gaugelab.optim import make_optimizer, muon_hybrid
from gaugelab.study.experiment import Experiment, StudyOutcome, run_experiment
from gaugelab.study.spec import ExperimentSpec
from gaugelab.study.sweep import Sweep
from gaugelab.tasks import TINY_SHAKESPEARE_SHA256, CharText


def build_members(spec: TwinSpec) -> tuple[list[Transformer], list[str]]:
    """The base model (seeded ``init_seed``) and its twins, base first, and their names."""
    base = Transformer(spec.model, seed=spec.init_seed, dtype=getattr(torch, spec.dtype))
    return make_twins(base, spec.twins, **spec.twin_draw())


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
    invariants = None
    if spec.hf is not None:
        data, members, names, invariants = hf_parts(spec)
    else:
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
        invariants=invariants,
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

    def spec_dict(self) -> dict[str, Any]:
        """The fields in JSON mode, without ``twin.hf`` when it is None (so a run of
        gaugelab's own Transformer keeps the identity it had before Hugging Face models)."""
        fields = super().spec_dict()
        if fields["twin"].get("hf") is None:
            fields["twin"].pop("hf", None)
        return fields

    def admit(self) -> None:
        """Reject a run whose text is missing or changed before anything trains.

        Raises:
            ValueError: the text file is missing, unreadable or not the one the spec names.
        """
        if self.twin.hf is not None:
            check_hf(self.twin.hf)
        elif self.twin.task == "text":
            try:
                self.twin.text()
            except FileNotFoundError as exc:
                raise ValueError(str(exc)) from None

    def execute(self, run) -> None:
        """Train (resuming from a checkpoint if one exists), log every checkpoint's metrics,
        store the verdict, then (optionally) merge and log that too."""
        label, steps = self.twin.optimizer, self.twin.steps
        result = run_twins(
            self.twin, sink=run.log, run=run, progress=lambda s: run.progress(label, s, steps)
        )
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


PLANNED_RUN_BYTES = 7_500
"""Memory one planned twin run takes before it trains (its spec, manifest and sweep entry):
measured with ``tracemalloc`` over ``plan`` of 2,000 runs (7.46 kB each), so a request of
``pairs × optimizers`` runs is known to fit, or not, before it is planned."""


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
    study is named ``twins-<10 hex of a digest of the base spec's identity, the optimizers and
    the pairs>`` unless ``name`` is given, so the same request always lands in the same study
    and a study holds exactly the runs of its request.

    Raises:
        ValueError: no optimizer, an unknown one, or ``pairs < 1``.
    """
    if not optimizers:
        raise ValueError("plan: optimizers is empty; allowed: zoo rules or 'muon-hybrid'")
    if pairs < 1:
        raise ValueError(f"plan: pairs={pairs}; allowed: an integer >= 1")
    base = base or TwinSpec()
    if merge and base.hf is not None:
        raise ValueError("plan: merge=True with a Hugging Face model; allowed: merge=False "
                         "(merging aligns gaugelab Transformer heads)")  # fmt: skip
    for opt in optimizers:  # validates every name before anything runs
        TwinSpec.model_validate({**base.model_dump(), "optimizer": opt, "hyper": {}})
    seeds = [
        {"twin.init_seed": base.init_seed + i, "twin.gauge_seed": base.gauge_seed + i}
        for i in range(pairs)
    ]
    study = TwinStudy(twin=base, merge=merge)
    # the study is this sweep: the base spec, the optimizers and the pairs name it, so a later
    # call with other optimizers is another study (its runs are still reused by identity)
    key = json.dumps([study.identity(), list(optimizers), pairs])
    return Sweep(
        study,
        grid={"twin.optimizer": list(optimizers)},
        seeds=seeds,
        name=name or f"twins-{hashlib.sha256(key.encode()).hexdigest()[:10]}",
    )


def run_twins_study(
    optimizers: Sequence[str] = DEFAULT_OPTIMIZERS,
    *,
    base: TwinSpec | None = None,
    pairs: int = 1,
    merge: bool = False,
    sweep: Sweep | None = None,
    **options: Any,
) -> StudyOutcome[TwinsResult]:
    """Run the twin study (:func:`plan`), collect the table and verdicts, write the report.

    Runs already completed in the store are reused; a run killed mid-way resumes from its
    last checkpoint (every measured step).

    Args:
        optimizers, base, pairs, merge: as :func:`plan`.
        sweep: the plan, when the caller built it already (e.g. to count its runs);
            default: :func:`plan` of the other arguments.
        **options: how to run it, as :func:`gaugelab.experiments.sensing.zoo.run_zoo` (one torch
            thread per run by default: the model is small, and on a shared machine one thread
            is several times faster; ``max_workers=N`` trains N runs at once).

    Returns:
        The :class:`~gaugelab.study.experiment.StudyOutcome` of a :class:`TwinsResult`.

    Raises:
        ValueError: bad optimizers, pairs or executor options.

    Source: singh2026lossbasis, §6; docs/protocols.md §5.
    """
    sweep = sweep or plan(optimizers, base=base, pairs=pairs, merge=merge)
    return run_experiment(sweep, collect, report, **options)


__all__ = [
    "DEFAULT_OPTIMIZERS",
    "EXPERIMENT",
    "HYBRID",
    "PLANNED_RUN_BYTES",
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
    "hf_twin",
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


EXPERIMENT: Experiment[TwinStudy, TwinsResult] = Experiment(
    TwinStudy.kind, TwinStudy, TwinsResult, plan, collect, tables, report, run_twins_study
)
"""This experiment's record (:class:`gaugelab.study.experiment.Experiment`)."""

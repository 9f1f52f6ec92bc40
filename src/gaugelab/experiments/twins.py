"""The attention-head twin study: every optimizer's twin run, stored, tabulated and plotted.

``TwinStudy`` is the harness spec of one twin run (one optimizer, one init × gauge-draw pair);
:func:`twin_sweep` builds the sweep over optimizers and pairs, and :func:`summarize` reads the
stored metrics back into the table, verdicts and figure of the protocol.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import torch
from pydantic import Field

from gaugelab.equivariance.merge import merge_twin
from gaugelab.equivariance.twins import (
    DEFAULT_OPTIMIZERS,
    TwinSpec,
    run_twins,
    text_model_config,
    twin_verdict,
)
from gaugelab.study.report import plot_curves
from gaugelab.study.spec import ExperimentSpec
from gaugelab.study.store import RunStore
from gaugelab.study.sweep import Sweep
from gaugelab.tasks import CharText, ModularArithmetic

QUICK_STEPS = 100  # the step-1 split and the early drift; about two minutes on 2 cores
QUICK_CHECKPOINTS = (0, 1, 10, 50, 100)
TABLE_STEPS = (1, 10, 100)


class TwinStudy(ExperimentSpec):
    """One twin run in the harness: a :class:`TwinSpec` plus what to do after training.

    Source: singh2026lossbasis, §6; PROTOCOLS §5.
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

    def execute(self, run) -> None:
        """Train, log every checkpoint's metrics, then (optionally) merge and log that too."""
        result = run_twins(self.twin, sink=run.log)
        final = self.twin.steps
        summary = {"verdict": result.verdict, "explanation": result.explanation}
        if self.merge:
            inputs, labels, last = _validation(self.twin)
            base = result.members[0]
            merged: dict[str, float] = {}
            for kind, twin in zip(self.twin.twins, result.members[1:], strict=True):
                metrics = merge_twin(base, twin, inputs, labels, last_position=last).metrics
                merged.update({f"merge/{kind}/{k}": v for k, v in metrics.items()})
            run.log(final + 1, merged)  # a step after training: the merge is post-hoc
        path = run.directory / "summary.json"
        path.write_text(json.dumps(summary, indent=2))
        run.artifact(path, "summary")


def _validation(spec: TwinSpec) -> tuple[torch.Tensor, torch.Tensor, bool]:
    if spec.task == "modular":
        task = ModularArithmetic(
            spec.modulus, train_fraction=spec.train_fraction, seed=spec.split_seed
        )
        return task.val_inputs, task.val_labels, True
    text = CharText(spec.text_path, block_size=spec.model.n_ctx)
    batches = text.batches(spec.batch_size, seed=spec.data_seed + 1, split="val")
    xs, ys = zip(*(next(batches) for _ in range(spec.val_batches)), strict=True)
    return torch.cat(xs), torch.cat(ys), False


def text_twin(path: str, *, steps: int = 300, block_size: int = 64, **overrides) -> TwinSpec:
    """The stochastic variant: a 6-layer, d_model 256 character model on ``path``.

    Raises:
        FileNotFoundError / ValueError: from :class:`gaugelab.tasks.CharText`.
    """
    text = CharText(path, block_size=block_size)
    checkpoints = tuple(s for s in (0, 1, 10, 50, 100, 200, 300, 500, 1000) if s <= steps)
    return TwinSpec(
        task="text",
        text_path=str(Path(path).resolve()),
        text_sha256=text.sha256,
        steps=steps,
        checkpoints=checkpoints,
        model=text_model_config(text.d_vocab, block_size),
        **overrides,
    )


def twin_sweep(
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
        raise ValueError("twin_sweep: optimizers is empty; allowed: zoo rules or 'muon-hybrid'")
    if pairs < 1:
        raise ValueError(f"twin_sweep: pairs={pairs}; allowed: an integer >= 1")
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


@dataclass
class TwinRow:
    """One optimizer × pair: the protocol's table row for every twin, and the verdict."""

    optimizer: str
    pair: int
    identity: str
    termination: str
    verdict: str
    explanation: str
    distances: dict[str, dict[int, float]] = field(default_factory=dict)  # twin → step → dist
    qk_drift: dict[str, float] = field(default_factory=dict)  # twin → final mean QK drift
    val_accuracy: dict[str, float] = field(default_factory=dict)  # member → final accuracy
    merge: dict[str, float] = field(default_factory=dict)


def summarize(store: RunStore, sweep: Sweep) -> list[TwinRow]:
    """Read every run of ``sweep`` back from the store into :class:`TwinRow` s."""
    rows = []
    base_init = sweep.spec.twin.init_seed
    for spec in sweep.specs():
        identity = spec.identity()
        attempts = store.attempts(identity)
        termination = attempts[-1].termination if attempts else "not run"
        row = TwinRow(
            spec.twin.optimizer,
            spec.twin.init_seed - base_init,
            identity,
            termination or "running",
            "",
            "",
        )
        values: dict[str, dict[int, float]] = {}
        for m in store.metrics(identity):
            values.setdefault(m.name, {})[m.step] = m.value
        final = spec.twin.steps
        for kind in spec.twin.twins:
            row.distances[kind] = values.get(f"{kind}/logit_distance", {})
            row.qk_drift[kind] = values.get(f"{kind}/qk_drift_mean", {}).get(final, float("nan"))
        for member in ("base", *spec.twin.twins):
            acc = values.get(f"{member}/val_accuracy", {}).get(final, float("nan"))
            row.val_accuracy[member] = acc
        row.merge = {
            n.removeprefix("merge/"): v[final + 1]
            for n, v in values.items()
            if n.startswith("merge/") and final + 1 in v
        }
        gauge, noise = row.distances.get("gauge", {}), row.distances.get("noise", {})
        steps = sorted(s for s in gauge if s >= 1 and s in noise)
        if steps and termination == "completed":
            row.verdict, row.explanation = twin_verdict(
                [gauge[s] for s in steps], [noise[s] for s in steps]
            )
        else:
            row.verdict = termination or "running"
        rows.append(row)
    return rows


def distance_figure(rows: Sequence[TwinRow]):
    """Log-scale logit distance against step for every optimizer's twins (noise floor dashed)."""
    series = {}
    floors = []
    for row in rows:
        label = row.optimizer if row.pair == 0 else f"{row.optimizer} (pair {row.pair})"
        for kind, by_step in row.distances.items():
            steps = sorted(s for s in by_step if s >= 1)
            if kind == "identity" or not steps:
                continue  # exactly 0: nothing to draw on a log axis
            series[f"{label} — {kind}"] = (steps, [max(by_step[s], 1e-18) for s in steps])
            if kind == "noise":
                floors.append(by_step[steps[0]])
    hlines = {"median noise twin at step 1": sorted(floors)[len(floors) // 2]} if floors else None
    return plot_curves(
        series,
        title="Twin divergence: relative logit distance to the base (validation)",
        xlabel="step",
        ylabel="relative logit distance",
        logy=True,
        hlines=hlines,
    )


__all__ = [
    "QUICK_CHECKPOINTS",
    "QUICK_STEPS",
    "TABLE_STEPS",
    "TwinRow",
    "TwinStudy",
    "distance_figure",
    "summarize",
    "text_twin",
    "twin_sweep",
]

"""`gaugelab learn-forget`: the learning–forgetting rank study with a sealed test set.

Parses its options into a :class:`~gaugelab.experiments.learn_forget.run.LearnForgetSpec`, makes one
library call (:func:`gaugelab.experiments.learn_forget.run.run_learn_forget`: the pretrain run,
every
cell, the decision, the one test opening, collect, report) and renders what it returns. Heavy
imports happen inside the command function, so that ``gaugelab --help`` stays fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from gaugelab.cli._console import print_outcome, run_study, wide_console
from gaugelab.cli._errors import fail, guarded
from gaugelab.cli._options import (
    RunOptions,
    check_dtype,
    comma_separated,
    study_command,
)
from gaugelab.lazy import LazyModule

_learn_forget = LazyModule("gaugelab.experiments.learn_forget.run")
_lora = LazyModule("gaugelab.experiments.lora.run")
_study_release_sealed = LazyModule("gaugelab.study.release.sealed")
_tasks_sources = LazyModule("gaugelab.tasks.sources")

__all__ = ["learn_forget", "register"]

OPTIONS = {
    "ranks": "--ranks",
    "seeds": "--seeds",
    "steps": "--steps",
    "lr": "--lr",
    "full_lr": "--full-lr",
    "rslora_rank": "--rslora-rank",
    "checkpoints": "--checkpoints",
    "min_target_gain": "--min-target-gain",
    "max_forgetting": "--max-forgetting",
    "min_stress_gain": "--min-stress-gain",
    "max_tail": "--max-tail",
    "second_target": "--second-target",
    "dtype": "--dtype",
}
"""LearnForgetSpec fields → the command's options (for its error messages)."""


@study_command
def learn_forget(
    ranks: Annotated[
        str | None,
        typer.Option(help="LoRA ranks, one candidate each (default 1,2,4,8,16; 1,4 --quick)."),
    ] = None,
    full: Annotated[
        bool, typer.Option(help="Include full fine-tuning (the reference of every contrast).")
    ] = True,
    rslora_rank: Annotated[
        int | None,
        typer.Option(
            help="rsLoRA (scale α/√r) at this rank (default: the largest of --ranks; 4 "
            "--quick); 0: none."
        ),
    ] = None,
    seeds: Annotated[
        str | None,
        typer.Option(
            help="Paired seeds, shared by every candidate: each draws the LoRA factors and the "
            "minibatch order (default 0,1)."
        ),
    ] = None,
    steps: Annotated[
        int | None, typer.Option(help="Fine-tuning steps (default 800; 20 --quick).")
    ] = None,
    checkpoints: Annotated[
        str | None,
        typer.Option(
            help="Declared checkpoint steps, chosen among on validation (default: the "
            "quarters of --steps)."
        ),
    ] = None,
    lr: Annotated[float | None, typer.Option(help="LoRA AdamW peak rate (default 5e-3).")] = None,
    full_lr: Annotated[
        float | None, typer.Option(help="Full fine-tuning AdamW peak rate (default 1e-3).")
    ] = None,
    min_target_gain: Annotated[
        float, typer.Option(help="Gate: target gain ≥ this (nats/char, base − candidate).")
    ] = 0.5,
    max_forgetting: Annotated[
        float,
        typer.Option(help="Gate: forgetting ≤ this (nats/char, candidate − base, retention)."),
    ] = 0.3,
    min_stress_gain: Annotated[
        float, typer.Option(help="Gate: stress gain ≥ this (the held-out email package).")
    ] = 0.0,
    max_tail: Annotated[
        float | None,
        typer.Option(
            help="Gate: the full update's relative energy beyond rank r ≤ this (default: "
            "reported, not gated)."
        ),
    ] = None,
    second_target: Annotated[
        Path | None,
        typer.Option(help="A second target block: a UTF-8 file or folder (*.py, *.txt)."),
    ] = None,
    quick: Annotated[
        bool, typer.Option(help="The quick model and schedule, ranks 1 and 4: seconds.")
    ] = False,
    dtype: Annotated[str, typer.Option(help="float32 (the protocol) or float64.")] = "float32",
    *,
    run_options: RunOptions,
) -> None:
    """Does LoRA learn less and forget less than full fine-tuning here, and which rank?

    The character model pretrained on tiny-shakespeare (retention; its run reused when stored)
    is adapted to Python standard-library source (target) by full fine-tuning and LoRA at each
    rank (α = 2r; rsLoRA at the largest), all on the same paired seeds. Every cell records its
    declared checkpoints; each candidate's checkpoint is chosen on validation alone (lowest
    target loss). Target gain, forgetting and stress gain (the held-out `email` package) are
    oriented against the pretrained model; the declared gates select the feasible candidate of
    least trainable parameters (then smallest rank); only then is the sealed test opened, once,
    for the selected candidate, the base and the full fine-tuning reference. An empty feasible
    set records "no release" and the test stays sealed. The report adds the full update's
    energy rank per layer (Biderman Fig. 6), paired contrasts against full fine-tuning, the
    Pareto plot, and what the study does not show.
    """
    console = wide_console()
    try:
        check_dtype(dtype)
        base = _learn_forget.quick_spec() if quick else _learn_forget.LearnForgetSpec()
        template = base.finetune.spec_dict()
        template["full"] = full
        template["pretrain"]["dtype"] = dtype
        for name, text, kind in (("ranks", ranks, int), ("seeds", seeds, int)):
            if text is not None:
                template[name] = comma_separated(text, OPTIONS[name], kind)
        for name, value in (("steps", steps), ("lr", lr), ("full_lr", full_lr)):
            if value is not None:
                template[name] = value
        fields: dict = dict(
            min_target_gain=min_target_gain,
            max_forgetting=max_forgetting,
            min_stress_gain=min_stress_gain,
            max_tail=max_tail,
            stress=base.stress,
            rslora_rank=max(template["ranks"], default=base.rslora_rank)
            if rslora_rank is None
            else (rslora_rank or None),
            checkpoints=None if steps is not None else base.checkpoints,
        )
        if checkpoints is not None:
            fields["checkpoints"] = comma_separated(checkpoints, OPTIONS["checkpoints"], int)
        if second_target is not None:
            c = base.finetune.pretrain.corpus
            try:
                fields["second_target"] = c.with_target(_tasks_sources.path_source(second_target))
            except (ValueError, FileNotFoundError) as exc:
                raise ValueError(f"--second-target {str(second_target)!r}: {exc}") from None
        spec = _learn_forget.LearnForgetSpec(
            finetune=_lora.FinetuneSpec.model_validate(template), **fields
        )
        sweep = _learn_forget.plan(spec)
        total = len(sweep.specs())
    except (ValueError, FileNotFoundError) as exc:
        raise fail(exc, OPTIONS) from None
    ft = spec.finetune
    header = (
        f"pretrain ({ft.pretrain.n_layers} layers, d_model {ft.pretrain.d_model}) + {total} "
        f"cell(s): {', '.join(spec.candidate_ids())} × block(s) {', '.join(spec.blocks())}, "
        f"seeds {list(ft.seeds)}, {ft.steps} steps, checkpoints "
        f"{list(spec.checkpoint_steps())}"
    )
    try:
        outcome = run_study(
            console, header, "learn-forget cells", _learn_forget.run_learn_forget, spec,
            sweep=sweep, options=run_options,
        )
    except (
        _study_release_sealed.SealedTestError
    ) as exc:  # the seal's log refuses or cannot be trusted: one line
        raise fail(exc) from None
    result = outcome.result
    shown = [
        t for t in _learn_forget.tables(result) if t.title.startswith(("Candidates", "Held-out"))
    ]
    lines = [Text(n) for n in _learn_forget.notes(result)]
    print_outcome(console, outcome, shown, notes=lines, label_columns=1)


def register(app: typer.Typer) -> None:
    """Add ``gaugelab learn-forget`` to ``app``."""
    app.command("learn-forget")(guarded(learn_forget))

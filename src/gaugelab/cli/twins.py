"""``gaugelab twins``: the attention-head twin protocol (the main job)."""

from __future__ import annotations

import math
import os
import shutil
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from gaugelab.cli._console import failure_line, rich_table, wide_console
from gaugelab.cli._errors import fail
from gaugelab.equivariance.twins import DEFAULT_OPTIMIZERS, TwinSpec, twin_optimizers
from gaugelab.errors import NonFiniteError
from gaugelab.experiments.twins import (
    QUICK_CHECKPOINTS,
    QUICK_STEPS,
    TABLE_STEPS,
    TwinRow,
    distance_figure,
    summarize,
    text_twin,
    twin_sweep,
)
from gaugelab.study import report as rep
from gaugelab.study.store import DEFAULT_STORE_PATH, RunStore, StoreError
from gaugelab.study.sweep import run_sweep


def _fmt(x: float | None) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    return "0" if x == 0 else f"{x:.2e}"


def _steps(final: int) -> list[int]:
    return [s for s in TABLE_STEPS if s < final] + [final]


def _label(row: TwinRow) -> str:
    return row.optimizer if row.pair == 0 else f"{row.optimizer} #{row.pair}"


def _distance_table(rows: list[TwinRow], final: int) -> rep.Table:
    """The protocol's table; the terminal and the report both render these rows."""
    columns = ["rule", "twin", *(f"step {s}" for s in _steps(final)), "QK drift", "val acc"]
    body = [
        [_label(row), kind, *(_fmt(by_step.get(s)) for s in _steps(final)),
         _fmt(row.qk_drift.get(kind)), f"{row.val_accuracy.get(kind, float('nan')):.3f}"]
        for row in rows
        for kind, by_step in row.distances.items()
    ]  # fmt: skip
    return rep.Table(
        title="Relative logit distance of each twin to its base (validation)",
        columns=columns,
        rows=body,
    )


def _merge_table(rows: list[TwinRow]) -> rep.Table | None:
    merged = [r for r in rows if r.merge]
    if not merged:
        return None
    models = ("base", "twin", "aligned", "unaligned")
    body = [
        [_label(row), kind, *(
            f"{row.merge.get(f'{kind}/{m}/val_loss', float('nan')):.3f} / "
            f"{row.merge.get(f'{kind}/{m}/val_accuracy', float('nan')):.3f}" for m in models)]
        for row in merged
        for kind in row.distances
    ]  # fmt: skip
    return rep.Table(
        title="Merging each twin into its base: validation loss / accuracy",
        columns=["rule", "twin", "base", "twin model", "aligned", "unaligned"],
        rows=body,
        caption="aligned: the twin rotated head by head onto the base (orthogonal Procrustes "
        "on (W_Q, W_K) and (W_V, W_O)) before averaging; unaligned: averaged as is.",
    )


def _cxx_compiler() -> str | None:
    """The C++ compiler torch.compile's CPU backend would find, or None."""
    named = os.environ.get("CXX")
    return shutil.which(named) if named else shutil.which("g++") or shutil.which("clang++")


def twins(
    optimizers: Annotated[
        str,
        typer.Option(
            help="Comma-separated rules: any listed by 'gaugelab optimizers', or 'muon-hybrid' "
            "(muon on the attention and MLP matrices, adam elsewhere)."
        ),
    ] = ",".join(DEFAULT_OPTIMIZERS),
    steps: Annotated[
        int | None,
        typer.Option(help="Training steps (default 1500; 100 with --quick; overrides --quick)."),
    ] = None,
    quick: Annotated[bool, typer.Option(help=f"{QUICK_STEPS} steps, for a first look.")] = False,
    dtype: Annotated[str, typer.Option(help="float32 (the reference) or float64.")] = "float32",
    pairs: Annotated[int, typer.Option(help="Init × gauge-draw pairs per optimizer.")] = 1,
    executor: Annotated[str, typer.Option(help="local (processes) or ray.")] = "local",
    max_workers: Annotated[
        int, typer.Option(help="Runs at once (each with --threads threads).")
    ] = 1,
    address: Annotated[
        str | None, typer.Option(help="Ray cluster address (with --executor ray).")
    ] = None,
    task: Annotated[str, typer.Option(help="modular (mod-47 addition) or text.")] = "modular",
    text: Annotated[
        Path | None, typer.Option(help="UTF-8 text for --task text, e.g. tinyshakespeare.txt.")
    ] = None,
    batch_size: Annotated[int, typer.Option(help="Minibatch size of --task text.")] = 32,
    threads: Annotated[
        int,
        typer.Option(
            help="Torch threads per run (the model is small: one thread is fastest on a shared "
            "machine; use --max-workers for more cores). OMP_NUM_THREADS, if set, wins."
        ),
    ] = 1,
    compile: Annotated[
        bool,
        typer.Option(
            help="Train through torch.compile: about 2× faster steps after a one-off "
            "compilation (a minute; needs a C++ compiler). Round-off differs from eager runs, "
            "so compiled runs are stored as runs of their own."
        ),
    ] = False,
    merge: Annotated[
        bool,
        typer.Option(
            help="After training, align each twin to its base head by head (orthogonal "
            "Procrustes), average, and print a second table: validation loss / accuracy of "
            "base, twin, aligned and unaligned averages."
        ),
    ] = False,
    store: Annotated[Path, typer.Option(help="Run store.")] = DEFAULT_STORE_PATH,
    out: Annotated[
        Path | None, typer.Option(help="Report folder (default: in the store's).")
    ] = None,
) -> None:
    """Train each optimizer's base model with its gauge, identity and noise twins.

    The gauge twin is the base with every attention head's (W_Q, W_K) in another basis (the
    same function); the identity twin must stay bit-identical; the noise twin (W_Q, W_K + 1e-7
    noise) shows how fast round-off alone grows. Defaults reproduce PROTOCOLS §5. Runs already
    completed in the store are not run again.
    """
    console = wide_console()
    names = [o.strip() for o in optimizers.split(",") if o.strip()]
    try:
        if steps is not None and steps < 1:
            raise ValueError(f"--steps {steps}; allowed: an integer >= 1")
        if executor not in ("local", "ray"):
            raise ValueError(f"--executor {executor!r}; allowed: local, ray")
        for option, value in (("--max-workers", max_workers), ("--threads", threads),
                              ("--pairs", pairs), ("--batch-size", batch_size)):  # fmt: skip
            if value < 1:
                raise ValueError(f"{option} {value}; allowed: an integer >= 1")
        if len(set(names)) != len(names):
            raise ValueError(f"--optimizers {optimizers!r} repeats a rule")
        if task not in ("modular", "text"):
            raise ValueError(f"--task {task!r}; allowed: modular, text")
        if dtype not in ("float32", "float64"):
            raise ValueError(f"--dtype {dtype!r}; allowed: float32, float64")
        if compile and not _cxx_compiler():
            raise ValueError(
                "--compile needs a C++ compiler (g++ or clang++ on PATH, or $CXX) and none was "
                "found; run without --compile (eager), or install one (make test does)"
            )
        if task != "text" and text is not None:
            raise ValueError(f"--text {text} is read only with --task text (task is {task!r})")
        if not names:
            raise ValueError("--optimizers is empty; allowed: zoo rules or 'muon-hybrid'")
        if unknown := [n for n in names if n not in twin_optimizers()]:
            raise ValueError(
                f"--optimizers {', '.join(unknown)}; allowed: {', '.join(twin_optimizers())}"
            )
        if task == "text":
            if text is None:
                raise ValueError("--task text needs --text PATH (a UTF-8 file)")
            try:
                base = text_twin(
                    str(text), steps=steps or (100 if quick else 300), dtype=dtype,
                    batch_size=batch_size, compile=compile,
                )  # fmt: skip
            except (ValueError, FileNotFoundError) as exc:
                raise ValueError(f"--text {text}: {exc}") from None
        else:
            n = steps or (QUICK_STEPS if quick else 1500)
            marks = QUICK_CHECKPOINTS if quick and steps is None else TwinSpec().checkpoints
            base = TwinSpec(steps=n, checkpoints=tuple(s for s in marks if s <= n), dtype=dtype,
                            compile=compile)  # fmt: skip
        sweep = twin_sweep(names, base=base, pairs=pairs, merge=merge)
    except (ValueError, FileNotFoundError) as exc:
        raise fail(exc) from None
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))  # read by torch in the workers
    total = len(sweep.specs())
    console.print(
        f"{total} twin run(s) ({', '.join(names)} × {pairs} pair(s)), {base.steps} step(s) each, "
        f"{base.dtype}{', compiled' if base.compile else ''}; store {store}"
    )
    try:
        with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn(
                "{task.completed}/{task.total} runs"), TimeElapsedColumn(),
                console=console) as progress:  # fmt: skip
            bar = progress.add_task("training twins", total=total)
            result = run_sweep(
                sweep, executor=executor, max_workers=max_workers, store=store, address=address,
                progress=lambda done, todo: progress.update(bar, completed=done, total=todo),
            )  # fmt: skip
    except (ValueError, StoreError, NonFiniteError) as exc:
        raise fail(str(exc)) from None
    if result.skipped:
        console.print(f"{len(result.skipped)} run(s) were already completed in the store: reused")
    with RunStore(store) as db:
        rows = summarize(db, sweep)
    tables = [_distance_table(rows, base.steps)]
    if (merge_table := _merge_table(rows)) is not None:
        tables.append(merge_table)
    for table in tables:
        console.print(rich_table(table, label_columns=2))
    for row in rows:
        label = row.optimizer if row.pair == 0 else f"{row.optimizer} #{row.pair}"
        console.print(f"[bold]{label}[/]: {row.verdict} — {row.explanation}")
    for outcome in result.failed:
        console.print(failure_line(outcome.identity, outcome.termination, outcome.message))
    folder = rep.new_report_dir(out or Path(store).parent / "reports" / sweep.study)
    figure = rep.save_figure(
        distance_figure(rows),
        folder,
        "logit_distance",
        caption="Each twin's logit distance to its base; dashed: noise floor.",
    )
    html = rep.write_report(
        rep.StudyReport(
            name=sweep.study,
            spec=sweep.spec.spec_dict(),
            runs=[rep.RunSummary(r.identity, r.termination, f"{r.optimizer} pair {r.pair}",
                                 {"verdict": r.verdict}) for r in rows],
            tables=tables,
            figures=[figure],
            failures=[rep.Failure(o.identity, o.termination, o.message) for o in result.failed],
            notes=[f"{r.optimizer} (pair {r.pair}): {r.verdict} — {r.explanation}" for r in rows],
        ),
        folder,
    )  # fmt: skip
    console.print(f"report: {html}")
    if not quick or task != "modular" or steps is not None:
        return
    more = [hint for hint, used in (("--dtype float64 for the float64 check", dtype == "float64"),
                                    ("--pairs 3 for more init × gauge draws", pairs > 1),
                                    ("--merge to test merging", merge)) if not used]  # fmt: skip
    console.print(
        "This was the quick look. The full protocol (1500 steps, PROTOCOLS §5): "
        f"[bold]gaugelab twins[/]{' — add ' + ', '.join(more) if more else ''}."
    )


def register(app: typer.Typer) -> None:
    """Add ``gaugelab twins`` to ``app``."""
    app.command()(twins)

"""Commands that browse the run store: ``runs list``, ``runs show``, ``runs export``, ``report``.

Every command reads the store at ``--store`` (default ``./gaugelab-runs/store.sqlite``) and
never creates one. Strings from the store (study names, messages, spec values) are printed as
plain text, never as rich markup. Errors are one ``error: …`` line on stderr with exit code 2.
"""

import csv
import io
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from gaugelab.cli._console import failure_line, wide_console, working
from gaugelab.cli._defaults import DEFAULT_STORE_PATH
from gaugelab.cli._errors import check_location, fail, guarded
from gaugelab.cli._run_labels import trains
from gaugelab.cli._run_lookup import MIN_PREFIX, check_study, find_run, open_store
from gaugelab.cli._tables import printable, rich_table
from gaugelab.lazy import LazyModule
from gaugelab.study.report.builder import Table as ReportTable
from gaugelab.study.report.folders import new_report_dir

_registry = LazyModule("gaugelab.experiments.registry")
_seals = LazyModule("gaugelab.study.store.seals")
_results = LazyModule("gaugelab.study.store.results")

if TYPE_CHECKING:
    from gaugelab.experiments.registry import WrittenReport
    from gaugelab.study.store.db import MetricRow, RunStore

# The store (pydantic specs) is imported by the commands that open one, and an experiment only
# by `report` of a study of its kind: `gaugelab runs list` imports no torch.

__all__ = ["export_metrics", "register", "trains"]

EXPORT_FORMATS = ("csv", "json")
EXPORT_COLUMNS = ("run", "attempt", "step", "name", "value")

StoreOption = Annotated[
    Path,
    typer.Option(
        "--store",
        help="The run store file (never created by these commands).",
        show_default=True,
    ),
]


def _console() -> Console:
    return wide_console()  # built per command, so COLUMNS and the captured stdout are current


def _t(value: object) -> Text:
    """Plain text for a table cell: store strings are never read as rich markup, and their
    control characters are escaped."""
    return Text("—" if value is None else printable(str(value)))


SPEC_LIST_MAX = 8
SPEC_LIST_HEAD = 3
"""``runs show`` prints a spec list longer than ``SPEC_LIST_MAX`` as its first
``SPEC_LIST_HEAD`` items (``--full-spec``: whole)."""


def report_study(store: "RunStore", study: str, out_dir: Path) -> "WrittenReport":
    """:func:`gaugelab.experiments.registry.report_study`, imported when a report is written
    (it imports the study's experiment, and only that one)."""
    return _registry.report_study(store, study, out_dir)


def list_runs(
    study: Annotated[
        str | None, typer.Option("--study", help="Only the runs of this study.")
    ] = None,
    store: StoreOption = DEFAULT_STORE_PATH,
) -> None:
    """List the runs in the store: identity, experiment, what each trains (optimizer, rules
    or settings of p), latest termination, attempts, studies and creation time.

    The termination column is the latest attempt's class (``open`` while it runs). On a
    narrow terminal the table continues below, the identity repeated.
    """
    with open_store(store) as db:
        check_study(db, study)
        runs = db.runs(study)
        rows = []
        for run in runs:
            attempts = db.attempts(run.identity)
            latest = (attempts[-1].termination or "open") if attempts else "not started"
            rows.append([run.identity[:12], run.kind, trains(run.kind, run.spec), latest,
                         len(attempts), ", ".join(run.studies),
                         run.created_at[:16].replace("T", " ")])  # fmt: skip
        title = f"runs in {db.path}" + (f" (study {study})" if study is not None else "")
    columns = ("identity", "experiment", "trains", "termination", "attempts", "studies",
               "created (UTC)")  # fmt: skip
    table = rich_table(ReportTable(title, columns, rows), label_columns=1)
    console = _console()
    console.print(table)
    if not runs:
        console.print(_t("no runs" + (f" in study {study}" if study is not None else "")))


def show_run(
    run: Annotated[
        str, typer.Argument(help=f"A unique identity prefix ({MIN_PREFIX}+ hex characters).")
    ],
    store: StoreOption = DEFAULT_STORE_PATH,
    full_spec: Annotated[
        bool,
        typer.Option(
            "--full-spec",
            help=f"Print every item of the spec's long lists (default: the first "
            f"{SPEC_LIST_HEAD} of a list longer than {SPEC_LIST_MAX}, e.g. a corpus's files).",
        ),
    ] = False,
) -> None:
    """Show one run: its manifest, spec, attempts, files (each checked against the sha256 the
    store recorded) and the last value of each metric."""
    with open_store(store) as db:
        row = find_run(db, run)
        attempts = db.attempts(row.identity)
        metrics = db.metrics(row.identity)
        artifacts = db.artifacts(row.identity)
        folder = db.path.parent
    m = row.manifest
    console = _console()
    manifest = Table(title=_t(f"run {row.identity}"), show_header=False)
    manifest.add_column("field", style="bold", no_wrap=True)
    manifest.add_column("value", overflow="fold")
    fields = {
        "identity": m.identity,
        "kind": m.kind,
        "studies": ", ".join(row.studies) or "—",
        "gaugelab": m.gaugelab_version,
        "torch": m.torch_version,
        "python": m.python_version,
        "machine": f"{m.machine.platform} ({m.machine.architecture}, {m.machine.cpu_count} CPUs)",
        "dtype": m.dtype,
        "seeds": ", ".join(f"{k}={v}" for k, v in m.seeds.items()) or "—",
        "git commit": m.git_commit,
        "created": m.created_at,
    }
    for key, value in fields.items():
        manifest.add_row(key, _t(value))
    console.print(manifest)
    console.print(Text("spec:", style="bold"))
    spec = row.spec if full_spec else _shortened(row.spec)
    console.print(Text(json.dumps(spec, indent=2, sort_keys=True, ensure_ascii=False)))
    if spec != row.spec:
        console.print(Text(f"(long lists shortened; `gaugelab runs show {row.identity[:12]} "
                           "--full-spec` prints them whole)", style="dim"))  # fmt: skip
    table = Table(title="attempts")
    for col in ("attempt", "termination", "started (UTC)", "ended (UTC)", "message"):
        table.add_column(col, overflow="fold")
    for a in attempts:
        table.add_row(
            _t(a.ordinal), _t(a.termination or "open"), _t(a.started_at[:26]),
            _t(a.ended_at and a.ended_at[:26]),
            _t(a.message),
        )  # fmt: skip
    console.print(table)
    if artifacts:
        table = Table(title="files (paths relative to the store's folder)")
        for col in ("attempt", "kind", "path", "sha256", "now"):
            table.add_column(col, overflow="fold")
        for a in artifacts:
            table.add_row(_t(a.ordinal), _t(a.kind), _t(_relative(a.path, folder)),
                          _t(a.sha256[:12]), _t(_file_state(a.path, a.sha256)))  # fmt: skip
        console.print(table)
    last: dict[str, MetricRow] = {}
    for r in metrics:  # sorted by name, then step
        last[r.name] = r
    if not last:
        console.print("no metrics logged")
        return
    table = Table(title="last metrics (the run's trajectory)")
    for col in ("metric", "step", "value", "attempt"):
        table.add_column(col, justify="left" if col == "metric" else "right", overflow="fold")
    for r in last.values():
        table.add_row(_t(r.name), _t(r.step), _t(f"{r.value:.6g}"), _t(r.ordinal))
    console.print(table)


def _shortened(value: Any) -> Any:
    """``value`` (a stored spec) with every list longer than :data:`SPEC_LIST_MAX` cut to its
    first :data:`SPEC_LIST_HEAD` items and a string saying how many are left out."""
    if isinstance(value, dict):
        return {k: _shortened(v) for k, v in value.items()}
    if isinstance(value, list):
        items = [_shortened(v) for v in value]
        if len(items) > SPEC_LIST_MAX:
            return [*items[:SPEC_LIST_HEAD], f"… {len(items) - SPEC_LIST_HEAD} more"]
        return items
    return value


def _relative(path: Path, folder: Path) -> str:
    return str(path.relative_to(folder)) if path.is_relative_to(folder) else str(path)


def _file_state(path: Path, sha256: str) -> str:
    """``intact``, ``missing`` (a checkpoint deleted by design reads the same), ``changed``
    or ``unreadable``: the file now, against the digest the store recorded."""
    try:
        return "intact" if _seals.file_sha256(path) == sha256 else "changed"
    except FileNotFoundError:
        return "missing"
    except OSError:
        return "unreadable"


def export_metrics(
    store: "RunStore", *, study: str | None = None, trajectory: bool = False
) -> "list[MetricRow]":
    """Every metric row of the store (or of one study), run by run in store order.

    Args:
        store: an open run store.
        study: only this study's runs.
        trajectory: only the rows of each run's trajectory (per step, the latest attempt that
            logged it, up to the latest completed attempt); default every attempt's rows.

    Returns:
        Rows sorted by run (oldest first), attempt ordinal, name, step.

    Raises:
        ValueError: unknown study.
    """
    rows: list[MetricRow] = []
    for run in store.runs(study):
        if trajectory:
            found = store.metrics(run.identity)
        else:
            found = [
                r
                for a in store.attempts(run.identity)
                for r in store.metrics(run.identity, ordinal=a.ordinal)
            ]
        rows.extend(sorted(found, key=lambda r: (r.ordinal, r.name, r.step)))
    return rows


def _render(rows: "list[MetricRow]", fmt: str) -> str:
    if fmt == "json":
        items = [json.dumps(dict(zip(EXPORT_COLUMNS, _fields(r), strict=True))) for r in rows]
        return "[\n" + ",\n".join(items) + ("\n" if items else "") + "]\n"
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(EXPORT_COLUMNS)
    writer.writerows(_fields(r) for r in rows)
    return buffer.getvalue()


def _fields(r: "MetricRow") -> tuple:
    return (r.run, r.ordinal, r.step, r.name, r.value)  # repr floats round-trip in both formats


def export(
    fmt: Annotated[
        str, typer.Option("--format", help="Output format: csv or json.", show_default=True)
    ] = "csv",
    study: Annotated[
        str | None, typer.Option("--study", help="Only the runs of this study.")
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Write to this new file (never overwritten); default stdout."),
    ] = None,
    trajectory: Annotated[
        bool,
        typer.Option(
            "--trajectory",
            help="Only each run's trajectory (latest attempt per step) instead of every "
            "attempt's rows.",
        ),
    ] = False,
    store: StoreOption = DEFAULT_STORE_PATH,
) -> None:
    """Export metric rows (run, attempt, step, name, value) as CSV or JSON."""
    if fmt not in EXPORT_FORMATS:
        raise fail(f"--format {fmt!r}; allowed: {', '.join(EXPORT_FORMATS)}")
    if out is not None and out.exists():
        raise fail(f"{out} already exists; refusing to overwrite, choose another --out FILE")
    try:
        check_location("--out", out)
    except ValueError as exc:
        raise fail(exc) from None
    with open_store(store) as db:
        check_study(db, study)
        rows = export_metrics(db, study=study, trajectory=trajectory)
    text = _render(rows, fmt)
    if out is None:
        typer.echo(text, nl=False)
        return
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(out, "x", encoding="utf-8", newline="") as handle:
            handle.write(text)
    except FileExistsError:
        raise fail(
            f"{out} already exists; refusing to overwrite, choose another --out FILE"
        ) from None
    table = Table(title="export")
    for col in ("file", "format", "rows", "runs"):
        table.add_column(col)
    table.add_row(_t(out), fmt, str(len(rows)), str(len({r.run for r in rows})))
    _console().print(table)


def report(
    study: Annotated[str, typer.Argument(help="The study's name (see `gaugelab runs list`).")],
    store: StoreOption = DEFAULT_STORE_PATH,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="Output folder (default: a new timestamped folder in reports/STUDY beside the "
            "store); an existing report is never overwritten.",
        ),
    ] = None,
) -> None:
    """Write a study's self-contained HTML report (spec, runs, tables, figures, failures).

    A study of an experiment (twins, zoo, dial, lora finetune, lora twins, lora kernel,
    intrinsic-dim, learn-forget) gets that experiment's report (the same tables, figures and
    verdicts the command printed, never opening a sealed test); any other study the generic
    one. A completed run whose files
    changed since it wrote them is counted as unverified, not completed, and named in one line.
    """
    try:
        check_location("--out", out, folder=True)
    except ValueError as exc:
        raise fail(exc) from None
    with open_store(store) as db:
        check_study(db, study, "STUDY")
        if out is not None:
            folder = out
        else:
            folder = new_report_dir(db.path.parent / "reports", study=study)
        console = _console()
        with working(console, f"report: writing {folder}"):
            written = report_study(db, study, folder)
        runs = db.runs(study)
        attempts = {r.identity: db.attempts(r.identity) for r in runs}
    completed = sum(
        any(a.termination == "completed" for a in run) and identity not in written.unverified
        for identity, run in attempts.items()
    )
    ended = [a.termination for run in attempts.values() for a in run if a.termination]
    failures = sum(map(_results.failed, ended))  # an attempt still running is no failure
    running = sum(any(a.termination is None for a in run) for run in attempts.values())
    table = Table(title=_t(f"report of study {study}"))
    for col in ("report", "runs", "completed", "running", "unverified", "failed attempts"):
        table.add_column(col, overflow="fold")
    table.add_row(_t(written.path), str(len(runs)), str(completed), str(running),
                  str(len(written.unverified)), str(failures))  # fmt: skip
    console = _console()
    console.print(table)
    for identity, message in written.unverified.items():
        console.print(failure_line(identity, "unverified", message))
    typer.echo(str(written.path))


def register(app: typer.Typer) -> None:
    """Add ``runs list``, ``runs show``, ``runs export`` and ``report`` to ``app``."""
    runs_app = typer.Typer(
        name="runs",
        help="Browse the run store: list runs, show one, export metrics.",
        no_args_is_help=True,
        add_completion=False,
    )
    runs_app.command("list")(guarded(list_runs))
    runs_app.command("show")(guarded(show_run))
    runs_app.command("export")(guarded(export))
    app.add_typer(runs_app, name="runs")
    app.command("report")(guarded(report))

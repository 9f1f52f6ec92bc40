"""`gaugelab lora compare` and `gaugelab lora compose`: subspace similarity and composition.

``compare`` calls :func:`gaugelab.experiments.lora_compare.run.run_lora_compare` and renders its
tables; ``compose`` calls :func:`gaugelab.experiments.lora_compare.run.run_lora_compose`. Heavy
imports (torch, the experiments) happen inside the command functions, so that
``gaugelab --help`` stays fast.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from gaugelab.cli._console import module_progress, wide_console
from gaugelab.cli._errors import check_location, fail, guarded
from gaugelab.cli._options import BaseCheckpoint, nonempty_study
from gaugelab.cli._tables import rich_table
from gaugelab.cli.bench import pinned_threads
from gaugelab.lazy import LazyModule

_lora_compare = LazyModule("gaugelab.experiments.lora_compare.run")
_lora_compare_views = LazyModule("gaugelab.experiments.lora_compare.views")
_store = LazyModule("gaugelab.study.store")

__all__ = ["compare", "compose", "register"]

STORE = Path("gaugelab-runs") / "store.sqlite"
"""The default run store (``gaugelab.study.store.db.DEFAULT_STORE_PATH``, without importing it)."""

_OPTIONS = {"seed_a": "--seed-a", "seed_b": "--seed-b", "study": "--study", "policy": "--policy",
            "rho": "--rho", "phi_max": "--phi-max", "null_samples": "--null-samples",
            "weights": "--weights", "method": "--method", "rank": "--rank", "seeds": "--seeds",
            "out": "--out", "dense_rho": "--dense-rho", "against_full": "--against-full",
            "null_seed": "--null-seed"}  # fmt: skip


def _policy(text: str) -> str | int:
    text = text.strip()
    allowed = "numerical, algebraic, energy, configured, or an integer k >= 1"
    try:
        k = int(text)
    except ValueError:
        k = None
    if k is not None:
        if k < 1:
            raise ValueError(f"--policy {text}; allowed: {allowed}")
        return k
    if text not in ("numerical", "algebraic", "energy", "configured"):
        raise ValueError(f"--policy {text!r}; allowed: {allowed}")
    return text


def compare(
    a: Annotated[
        str,
        typer.Argument(
            help="An adapter folder (PEFT format), a candidate of a stored study "
            "(full, 'lora r=4'), or a run identity.",
            show_default=False,
        ),
    ],
    b: Annotated[
        str | None,
        typer.Argument(
            help="The second adapter, candidate or run (or give --against-full).",
            show_default=False,
        ),
    ] = None,
    against_full: Annotated[
        str | None,
        typer.Option(
            help="Compare A with this full fine-tuning run (a run identity or 'full') instead of B."
        ),
    ] = None,
    seed_a: Annotated[
        int | None, typer.Option(help="Seed of A's run (default: its first).")
    ] = None,
    seed_b: Annotated[
        int | None, typer.Option(help="Seed of B's run (default: its first).")
    ] = None,
    study: Annotated[
        str | None, typer.Option(
            callback=nonempty_study, help="Study of candidate labels (default: the newest)."
        )
    ] = None,
    policy: Annotated[
        str,
        typer.Option(
            help="Rank policy of adapter updates: numerical, energy, algebraic, "
            "configured, or an integer k (the leading k directions)."
        ),
    ] = "numerical",
    rho: Annotated[float, typer.Option(help="Energy fraction of --policy energy.")] = 0.99,
    dense_rho: Annotated[
        float, typer.Option(help="Energy fraction that sets the rank of a full update.")
    ] = 0.9,
    phi_max: Annotated[int, typer.Option(help="Largest i and j of the φ heatmaps.")] = 64,
    null_samples: Annotated[
        int, typer.Option(help="Monte-Carlo Haar null: draws per module and side (0: none).")
    ] = 0,
    null_seed: Annotated[int, typer.Option(help="Seed of the Monte-Carlo null.")] = 0,
    quick: Annotated[
        bool, typer.Option(help="φ up to 8 and no Monte-Carlo null: seconds.")
    ] = False,
    base: BaseCheckpoint = None,
    threads: Annotated[int, typer.Option(help="Torch threads.")] = 1,
    store: Annotated[Path, typer.Option(help="Run store.")] = STORE,
    out: Annotated[
        Path | None, typer.Option(help="Report folder (default: in the store's).")
    ] = None,
    report: Annotated[bool, typer.Option(help="Write the HTML report and φ heatmaps.")] = True,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the result as JSON (no tables).")
    ] = False,
) -> None:
    """Do two adapters learn the same thing? Principal angles of their update spans.

    Per module shared by A and B: the principal angles between the row spaces (the input
    directions each update reads) and between the column spaces (the output directions it
    writes) of ΔW = s·B A, extracted by a declared rank policy in factor space — never raw
    factor entries, which the gauge (B G, G⁻¹ A) changes freely. Then projection mass,
    min-rank overlap, both directed coverages, chordal and projector distances against the
    Haar baseline of the same ranks and dimension, the factors' own spans beside the update's,
    and φ heatmaps per projection with a random pair beside them (the LoRA paper's Figure 3).
    A full fine-tuning update's rank is its energy rank (--dense-rho), and so is a DoRA
    adapter's effective update (dense; it needs --base).
    """
    console = wide_console()
    try:
        if (b is None) == (against_full is None):
            raise ValueError("give B or --against-full RUN (exactly one)")
        if threads < 1:
            raise ValueError(f"--threads {threads}; allowed: an integer >= 1")
        chosen = _policy(policy)
        check_location("--out", out, folder=True)
        if quick:
            phi_max, null_samples = min(phi_max, 8), 0
        other = b if b is not None else against_full
        bar = module_progress(console, f"comparing {a} with {other}")
        with pinned_threads(threads), bar as progress:
            result, path = _lora_compare.run_lora_compare(
                a, other, store=store, seed_a=seed_a, seed_b=seed_b, study=study,
                policy=chosen, rho=rho, dense_rho=dense_rho, phi_max=phi_max,
                null_samples=null_samples, null_seed=null_seed, report_dir=out,
                write_report=report, against_full=against_full is not None, base=base,
                progress=progress,
            )  # fmt: skip
    # an ArtifactError (a run's file changed) is a StoreError
    except (ValueError, FileNotFoundError, FileExistsError, _store.StoreError) as exc:
        raise fail(str(exc).removeprefix("compare_lora: "), _OPTIONS) from None
    if json_out:
        typer.echo(_lora_compare_views.to_json(result))
        return
    for table in _lora_compare_views.compare_tables(result):
        console.print(rich_table(table, label_columns=1))
    for line in result.notes:
        console.print(Text(line, style="yellow"))
    if path is not None:
        console.print(Text(f"report: {path}"))


def _floats(text: str, option: str) -> tuple[float, ...]:
    try:
        values = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ValueError(f"{option} {text!r}; allowed: comma-separated numbers") from None
    if not all(math.isfinite(v) for v in values):
        raise ValueError(f"{option} {text!r}; allowed: comma-separated finite numbers")
    return values


def compose(
    sources: Annotated[
        list[str],
        typer.Argument(
            help="Adapters to compose: folders, candidates ('lora r=4') or run identities.",
            show_default=False,
        ),
    ],
    out: Annotated[Path, typer.Option(help="Folder to write the composed PEFT adapter to.")],
    weights: Annotated[
        str | None, typer.Option(help="λ_j, comma-separated, one per source (default 1 each).")
    ] = None,
    method: Annotated[
        str, typer.Option(help="cat (concatenated factors, exact) or svd (rank --rank).")
    ] = "cat",
    rank: Annotated[int | None, typer.Option(help="Rank of --method svd.")] = None,
    seeds: Annotated[
        str | None, typer.Option(help="Seed of each source's run, comma-separated.")
    ] = None,
    study: Annotated[
        str | None, typer.Option(
            callback=nonempty_study, help="Study of candidate labels (default: the newest)."
        )
    ] = None,
    evaluate: Annotated[
        bool,
        typer.Option(
            help="Validation losses and sampled-output interference (needs "
            "stored runs of one pretrain run)."
        ),
    ] = True,
    quick: Annotated[
        bool, typer.Option(help="One validation batch per target for the activations: seconds.")
    ] = False,
    base: BaseCheckpoint = None,
    threads: Annotated[int, typer.Option(help="Torch threads.")] = 1,
    store: Annotated[Path, typer.Option(help="Run store.")] = STORE,
    report_out: Annotated[
        Path | None, typer.Option("--report-dir", help="Report folder (default: in the store's).")
    ] = None,
    report: Annotated[bool, typer.Option(help="Write the HTML report.")] = True,
    allow_base_mismatch: Annotated[
        bool,
        typer.Option(help="Compose adapters whose base_model_name_or_path differ (a hub id "
                     "and a local path of one model); the written config then names no base, "
                     "gaugelab_composition.json lists each source's."),
    ] = False,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the result as JSON (no tables).")
    ] = False,
) -> None:
    """Compose adapters Σ λ_j s_j B_j A_j and write the result as a PEFT adapter.

    --method cat concatenates the factors (exact; rank at most min(rank B_cat, rank A_cat,
    Σ r_j)); --method svd keeps the composition's best rank --rank approximation and reports
    its residual. Each source keeps its own scale s_j from its (α, r, rsLoRA). Prints the rank
    ledger per module, the interference of every pair (span overlaps apart from the Frobenius
    cross term 2⟨ΔW_i, ΔW_j⟩ and the cross term of the layer outputs on real activations) and,
    for stored runs, the validation losses of the composition against each adapter alone.
    """
    console = wide_console()
    try:
        lam = _floats(weights, "--weights") if weights is not None else None
        if lam is not None and len(lam) != len(sources):
            raise ValueError(f"--weights has {len(lam)} values for {len(sources)} sources; "
                             "allowed: one per source")
        per_seed = None
        if seeds is not None:
            per_seed = [int(x) for x in seeds.split(",")]
            if len(per_seed) != len(sources):
                raise ValueError(f"--seeds has {len(per_seed)} values for {len(sources)} sources")
        if threads < 1:
            raise ValueError(f"--threads {threads}; allowed: an integer >= 1")
        if method == "svd" and (rank is None or rank < 1):
            given = "" if rank is None else f", got --rank {rank}"
            raise ValueError(f"--method svd needs --rank K (K >= 1){given}")
        check_location("--out", out, folder=True)
        bar = module_progress(console, f"composing {len(sources)} adapters")
        with pinned_threads(threads), bar as progress:
            result, path = _lora_compare.run_lora_compose(
                sources, out, store=store, weights=lam, method=method, rank=rank,
                seeds=per_seed, study=study, evaluate=evaluate, samples=1 if quick else 2,
                report_dir=report_out, write_report=report,
                allow_different_bases=allow_base_mismatch, base=base, progress=progress,
            )  # fmt: skip
    # an ArtifactError (a run's file changed) is a StoreError
    except (ValueError, FileNotFoundError, FileExistsError, _store.StoreError) as exc:
        message = str(exc)
        for prefix in ("compose_lora: ", "compose_adapters: "):
            message = message.removeprefix(prefix)
        message = message.replace("allow_different_bases=True", "--allow-base-mismatch")
        raise fail(message, _OPTIONS) from None
    if json_out:
        typer.echo(_lora_compare_views.to_json(result))
        return
    for table in _lora_compare_views.compose_tables(result):
        console.print(rich_table(table, label_columns=1))
    for line in result.notes:
        console.print(Text(line, style="yellow"))
    console.print(Text(f"adapter: {result.out}"))
    if path is not None:
        console.print(Text(f"report: {path}"))


def register(group: typer.Typer) -> None:
    """Add ``compare`` and ``compose`` to ``group`` (``gaugelab lora``)."""
    group.command("compare")(guarded(compare))
    group.command("compose")(guarded(compose))

"""``gaugelab lora``: LoRA on real text — ``finetune`` and ``inspect``.

``finetune`` parses its options into a :class:`~gaugelab.experiments.lora.run.FinetuneSpec`, makes
one library call (:func:`gaugelab.experiments.lora.run.run_lora_finetune`: pretrain, fine-tune every
candidate, collect, report) and renders what it returns. ``inspect`` calls
:func:`gaugelab.experiments.lora.run.run_lora_inspect` on an adapter folder, a candidate of a stored
study or a run identity, and renders its tables.
"""

from typing import Annotated

import typer
from rich.text import Text

from gaugelab.cli import lora_compare, lora_kernel, lora_twins
from gaugelab.cli._console import (
    module_progress,
    print_outcome,
    rich_table,
    run_study,
    wide_console,
)
from gaugelab.cli._defaults import DEFAULT_STORE_PATH, FULL_LR, LORA_LR
from gaugelab.cli._errors import check_location, fail, guarded
from gaugelab.cli._options import (
    BaseCheckpoint,
    Out,
    RunOptions,
    Store,
    check_dtype,
    comma_separated,
    nonempty_study,
    study_command,
)
from gaugelab.cli.bench import pinned_threads
from gaugelab.lazy import LazyModule

_lora = LazyModule("gaugelab.experiments.lora.run")
_lora_inspect = LazyModule("gaugelab.experiments.lora.inspect")
_store = LazyModule("gaugelab.study.store")

__all__ = ["finetune", "inspect", "lora_app", "register"]

OPTIONS = {
    "ranks": "--ranks", "seeds": "--seeds", "steps": "--steps", "lr": "--lr",
    "full_lr": "--full-lr", "targets": "--targets", "alpha_ratio": "--alpha-ratio",
    "rslora": "--rslora", "full": "--full", "init": "--init", "batch_size": "--batch-size",
    "diagnostics_every": "--diagnostics-every",
}  # fmt: skip
"""FinetuneSpec fields → the options of ``gaugelab lora finetune`` (for its error messages)."""

lora_app = typer.Typer(
    name="lora",
    help="LoRA on real text: fine-tune a character Transformer (full and LoRA at several "
    "ranks), inspect, compare and compose PEFT-format adapters, train LoRA gauge twins, "
    "measure the kernel regime.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
)


@study_command
def finetune(
    ranks: Annotated[str, typer.Option(help="LoRA ranks, one candidate each.")] = "1,4,16",
    full: Annotated[bool, typer.Option(help="Include full fine-tuning.")] = True,
    rslora: Annotated[bool, typer.Option(help="rsLoRA scale α/√r instead of α/r.")] = False,
    targets: Annotated[
        str,
        typer.Option(
            help="Projections LoRA adapts in every block: attention, mlp, or module names "
            "(q_proj, k_proj, v_proj, o_proj, fc_in, fc_out), comma-separated."
        ),
    ] = "attention,mlp",
    alpha_ratio: Annotated[float, typer.Option(help="lora_alpha = ratio · r.")] = 2.0,
    seeds: Annotated[
        str, typer.Option(help="Seeds, comma-separated (trained as one ensemble per candidate).")
    ] = "0",
    lr: Annotated[float, typer.Option(help="LoRA learning rate (AdamW peak).")] = LORA_LR,
    full_lr: Annotated[
        float, typer.Option(help="Full fine-tuning learning rate (AdamW peak).")
    ] = FULL_LR,
    steps: Annotated[
        int | None, typer.Option(help="Fine-tuning steps (default 800; 20 with --quick).")
    ] = None,
    pretrain_steps: Annotated[
        int | None, typer.Option(help="Pretrain steps (default 2000; 30 with --quick).")
    ] = None,
    quick: Annotated[
        bool, typer.Option(help="A 2-layer, d_model 32 model and a few steps: seconds.")
    ] = False,
    dtype: Annotated[str, typer.Option(help="float32 (the protocol) or float64.")] = "float32",
    diagnostics_every: Annotated[
        int | None,
        typer.Option(
            help="Log every LoRA module's factor record (norms, update change, singular "
            "values, rank, Adam moments; seed 003 §0x08L) after every N updates per seed "
            "(diag/… metrics in the store). Off by default."
        ),
    ] = None,
    *,
    run_options: RunOptions,
) -> None:
    """Pretrain a character Transformer on tiny-shakespeare, then fine-tune it on Python.

    The target domain is the pinned standard-library source of this interpreter; candidates
    are full fine-tuning and LoRA at every rank of --ranks, each a stored, resumable run that
    logs both domains' validation loss and records its adapter (PEFT format) or dense deltas.
    The pretrain is a stored run of its own, reused by every study that starts from it. The
    defaults take about ten minutes on two cores; `gaugelab lora inspect full` (or
    `"lora r=4"`) then reads what a candidate learned.
    """
    console = wide_console()
    try:
        check_dtype(dtype)
        for option, value in (("--steps", steps), ("--pretrain-steps", pretrain_steps)):
            if value is not None and value < 1:
                raise ValueError(f"{option} {value}; allowed: an integer >= 1")
        chosen = _lora.resolve_targets(targets)
        fields = dict(ranks=comma_separated(ranks, "--ranks"), full=full, rslora=rslora,
                      targets=chosen, alpha_ratio=alpha_ratio,
                      seeds=comma_separated(seeds, "--seeds"), lr=lr, full_lr=full_lr)  # fmt: skip
        pretrain: dict = {"dtype": dtype}
        if pretrain_steps is not None:
            pretrain["steps"] = pretrain_steps
        if steps is not None:
            fields["steps"] = steps
        if diagnostics_every is not None:
            fields["diagnostics_every"] = diagnostics_every
        if quick:
            spec = _lora.quick_spec(pretrain=pretrain, **fields)
        else:
            spec = _lora.FinetuneSpec(pretrain=_lora.PretrainSpec(**pretrain), **fields)
        sweep = _lora.plan(spec)
        total = len(sweep.specs())
    except (ValueError, FileNotFoundError) as exc:
        raise fail(exc, OPTIONS) from None
    p = spec.pretrain
    header = (
        f"pretrain ({p.n_layers} layers, d_model {p.d_model}, {p.steps} steps) + {total} "
        f"candidate(s) ({', '.join(spec.candidates())}) × seeds {list(spec.seeds)}, "
        f"{spec.steps} steps each, {p.dtype}"
    )
    outcome = run_study(
        console, header, "lora runs", _lora.run_lora_finetune, spec, sweep=sweep,
        options=run_options,
    )
    result = outcome.result
    lines = [Text(f"{c.label}: run {c.state.identity[:12]}") for c in result.completed]
    print_outcome(console, outcome, _lora.tables(result), notes=lines, label_columns=1)
    if result.candidates:
        store = run_options.store
        where = "" if store == DEFAULT_STORE_PATH else f" --store {store}"
        last = result.candidates[-1].label
        console.print(Text(f"inspect a candidate: gaugelab lora inspect {last!r}{where}"))


def inspect(
    source: Annotated[
        str,
        typer.Argument(
            help="An adapter folder (PEFT format), a candidate of a stored study (full, "
            "'lora r=4'), or a run identity (4+ hex characters).",
            show_default=False,
        ),
    ],
    ranks: Annotated[str, typer.Option(help="Truncation ranks.")] = "1,4,16",
    seed: Annotated[
        int | None, typer.Option(help="Which seed of the run (default: its first).")
    ] = None,
    study: Annotated[
        str | None,
        typer.Option(
            callback=nonempty_study,
            help="Study of a candidate label (default: the newest that has it).",
        ),
    ] = None,
    evidence: Annotated[
        bool,
        typer.Option(help="Compute the evidence ladder (needs the base model and its data)."),
    ] = True,
    base: BaseCheckpoint = None,
    threads: Annotated[int, typer.Option(help="Torch threads.")] = 1,
    store: Store = DEFAULT_STORE_PATH,
    out: Out = None,
    report: Annotated[bool, typer.Option(help="Write the HTML report and figures.")] = True,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the result as JSON (no tables).")
    ] = False,
    data: Annotated[
        str | None,
        typer.Option(help="Text the ladder reads with --base: a UTF-8 text file, or .jsonl "
                     "(one object per line, the document in --field)."),
    ] = None,
    tokens: Annotated[
        int, typer.Option(help="Input positions the ladder reads from --data (per module).")
    ] = 4096,
    window: Annotated[
        int, typer.Option(help="Positions per window of --data (capped by the model's context).")
    ] = 128,
    field: Annotated[str, typer.Option(help="The JSONL field holding a document.")] = "text",
    head: Annotated[
        str,
        typer.Option(help="Open --base as: auto (causal-lm for a CAUSAL_LM adapter, else base), "
                     "causal-lm, or base (the backbone: no end-to-end loss)."),
    ] = "auto",
    dtype: Annotated[
        str, typer.Option(help="The --base model's dtype: float32 or float64.")
    ] = "float32",
    end_to_end: Annotated[
        bool,
        typer.Option(help="With --base: the next-token losses with each update replaced (two "
                     "passes over the windows per module and rank)."),
    ] = True,
    random_base: Annotated[
        bool,
        typer.Option(help="Run the ladder on a random init when --base has no weights "
                     "(refused otherwise: it measures nothing about your base)."),
    ] = False,
) -> None:
    """What an adapter's updates are: rank policies, spectrum, truncation, evidence ladder.

    Per adapted module: the configured rank, every rank policy (algebraic, numerical, stable,
    energy at 90% and 99%, both entropy ranks), the spectrum (figure) and the weight-space
    truncation table — from the factors alone. For a stored run (or an adapter whose base is a
    stored pretrain run) also the evidence ladder: weight residual, output residual on the
    layer's real inputs, and target validation loss when each update is replaced by its
    weight-SVD or its output-weighted rank-r truncation, per layer and jointly. A plain PEFT
    folder gets what the factors allow, and the list of what could not be computed; with
    `--base FOLDER --data FILE` (a Hugging Face model and your text) it gets the ladder too.
    """
    console = wide_console()
    try:
        wanted = comma_separated(ranks, "--ranks")
        if any(r < 0 for r in wanted):
            raise ValueError(f"--ranks {ranks}; allowed: integers >= 0")
        check_location("--out", out, folder=True)
        if data is not None and base is None:
            raise ValueError("--data needs --base: the ladder reads a base model and text")
        hf = None
        if data is not None:
            hf = _lora.HFEvidence(base=str(base), data=data, tokens=tokens, window=window,
                                  field=field, head=head, dtype=dtype,
                                  random_init=random_base, end_to_end=end_to_end)  # fmt: skip
        bar = module_progress(console, f"inspecting {source}")
        with pinned_threads(threads), bar as progress:
            result, path = _lora.run_lora_inspect(
                source, store=store, ranks=wanted, seed=seed, study=study, evidence=evidence,
                report_dir=out, write_report=report, base=base, hf=hf, progress=progress,
            )  # fmt: skip
    # an ArtifactError (a run's file changed) is a StoreError
    except (ValueError, FileNotFoundError, FileExistsError, ImportError,
            _store.StoreError) as exc:  # fmt: skip
        options = {"seed": "--seed", "ranks": "--ranks", "study": "--study"}
        raise fail(str(exc).removeprefix("inspect_lora: "), options) from None
    if json_out:
        typer.echo(_lora_inspect.to_json(result))
        return
    for table in _lora.inspect_tables(result):
        console.print(rich_table(table, label_columns=1))
    for line in result.not_computed:
        console.print(Text(f"not computed: {line}", style="yellow"))
    if result.other_updates:
        console.print(Text("also updated, not analysed: " + ", ".join(result.other_updates)))
    if path is not None:
        console.print(Text(f"report: {path}"))


lora_app.command("finetune")(guarded(finetune))
lora_app.command("inspect")(guarded(inspect))
lora_compare.register(lora_app)
lora_twins.register(lora_app)
lora_kernel.register(lora_app)


def register(app: typer.Typer) -> None:
    """Add ``gaugelab lora`` (``finetune``, ``inspect``) to ``app``."""
    app.add_typer(lora_app, name="lora")

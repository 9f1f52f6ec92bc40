"""``gaugelab twins``: the attention-head twin protocol (the main job).

Parses the options into a base spec, makes one library call
(:func:`gaugelab.experiments.twins.run.run_twins_study`: run, collect the stored metrics and
verdicts, write the report) and renders what it returns.
"""

import os
import shutil
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.text import Text

from gaugelab.cli._console import print_outcome, run_study, wide_console
from gaugelab.cli._defaults import TWIN_OPTIMIZERS, TWIN_QUICK_STEPS
from gaugelab.cli._errors import fail, guarded, is_validation_error
from gaugelab.cli._options import RunOptions, check_memory, study_command
from gaugelab.lazy import LazyModule

_tasks_text = LazyModule("gaugelab.tasks.text")
_twins = LazyModule("gaugelab.experiments.twins.run")
_twins_views = LazyModule("gaugelab.experiments.twins.views")

OPTIONS = {"steps": "--steps", "dtype": "--dtype", "batch_size": "--batch-size",
           "optimizer": "--optimizers", "compile": "--compile",
           "gauge_draw": "--gauge-draw", "block_size": "--block-size",
           "merge": "--merge"}  # fmt: skip
"""TwinSpec fields → the options that set them (for its error messages)."""


def run_twins_study(*args: Any, **options: Any) -> Any:
    """:func:`gaugelab.experiments.twins.run.run_twins_study`, imported when the command runs (the
    experiment imports torch; ``gaugelab --help`` must not)."""
    return _twins.run_twins_study(*args, **options)


def _cxx_compiler() -> str | None:
    """The C++ compiler torch.compile's CPU backend would find, or None."""
    named = os.environ.get("CXX")
    return shutil.which(named) if named else shutil.which("g++") or shutil.which("clang++")


def batch_bytes(base) -> int:
    """A lower bound of one training step's memory, in bytes, for a text or Hugging Face twin run.

    A batch's windows (index, inputs, targets: int64 ``[B, T]``) and, for each of the four
    ensemble members (base and its three twins), one layer's attention scores ``[B, H, T, T]``
    and its widest activations ``[B, T, d_mlp + vocab]`` in the run's dtype. A Hugging Face
    model counts one head and no activations (its config is read only when the run starts).
    """
    B = base.batch_size
    itemsize = 8 if base.dtype == "float64" else 4
    if base.hf is not None:
        T, heads, width = base.hf.block_size, 1, 0
    else:
        m = base.model
        T, heads, width = m.n_ctx, m.n_heads, m.d_mlp + m.d_vocab
    return 3 * 8 * B * T + 4 * B * T * (heads * T + width) * itemsize


def _model_clause(base: Any) -> str:
    """``, <model_type> from PATH (weights, tokens)`` for a Hugging Face run, else ``""``."""
    hf = base.hf
    if hf is None:
        return ""
    weights = "its weights" if hf.weights == "checkpoint" else "a random init"
    return f", {hf.model_type} from {hf.path} ({weights}, {hf.tokens})"


@study_command
def twins(
    optimizers: Annotated[
        str,
        typer.Option(
            help="Comma-separated rules: any listed by 'gaugelab optimizers', or 'muon-hybrid' "
            "(muon on the attention and MLP matrices, adam elsewhere)."
        ),
    ] = ",".join(TWIN_OPTIMIZERS),
    steps: Annotated[
        int | None,
        typer.Option(help="Training steps (default 1500; 100 with --quick; overrides --quick)."),
    ] = None,
    quick: Annotated[
        bool, typer.Option(help=f"{TWIN_QUICK_STEPS} steps, for a first look.")
    ] = False,
    dtype: Annotated[str, typer.Option(help="float32 (the reference) or float64.")] = "float32",
    pairs: Annotated[int, typer.Option(help="Init × gauge-draw pairs per optimizer.")] = 1,
    gauge_draw: Annotated[
        str,
        typer.Option(
            help="reference: Q of QR(randn) in float32 without a sign fix, as the reference "
            "scripts (and float32 noise); haar: sign-fixed Haar draw (and float64 noise). Part "
            "of the run identity."
        ),
    ] = "reference",
    task: Annotated[str, typer.Option(help="modular (mod-47 addition) or text.")] = "modular",
    text: Annotated[
        Path | None,
        typer.Option(help="UTF-8 text for --task text (default: the packaged tiny-shakespeare)."),
    ] = None,
    batch_size: Annotated[
        int, typer.Option(help="Minibatch size of --task text and of --model.")
    ] = 32,
    model: Annotated[
        Path | None,
        typer.Option(
            help="A local Hugging Face model folder or its config.json (GPT-2, GPT-NeoX, "
            "Llama, Mistral, Qwen2; weights from the folder's safetensors, else a random init "
            "from the config; nothing is downloaded): its twins train on the packaged "
            "tiny-shakespeare through its tokenizer, or as bytes. Needs gaugelab[hf]."
        ),
    ] = None,
    block_size: Annotated[int, typer.Option(help="Tokens per training window with --model.")] = 64,
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
    *,
    run_options: RunOptions,
) -> None:
    """Train each optimizer's base model with its gauge, identity and noise twins.

    The gauge twin is the base with every attention head's (W_Q, W_K) in another basis (the
    same function); the identity twin must stay bit-identical; the noise twin (W_Q, W_K + 1e-7
    noise) shows how fast round-off alone grows. Defaults reproduce docs/protocols.md §5. Runs
    already completed in the store are not run again; a run killed mid-way resumes from its last
    checkpoint when the same command is run again.
    """
    console = wide_console()
    names = [o.strip() for o in optimizers.split(",") if o.strip()]
    try:
        if pairs < 1:
            raise ValueError(f"--pairs {pairs}; allowed: an integer >= 1")
        if len(set(names)) != len(names):
            raise ValueError(f"--optimizers {optimizers!r} repeats a rule")
        if task not in ("modular", "text"):
            raise ValueError(f"--task {task!r}; allowed: modular, text")
        if compile and not _cxx_compiler():
            raise ValueError(
                "--compile needs a C++ compiler (g++ or clang++ on PATH, or $CXX) and none was "
                "found; run without --compile (eager), or install one (make test does)"
            )
        if task != "text" and text is not None:
            raise ValueError(f"--text {text} is read only with --task text (task is {task!r})")
        if not names:
            raise ValueError("--optimizers is empty; allowed: zoo rules or 'muon-hybrid'")
        if unknown := [n for n in names if n not in _twins.twin_optimizers()]:
            raise ValueError(
                f"--optimizers {', '.join(unknown)}; allowed: {', '.join(_twins.twin_optimizers())}"
            )
        if model is not None:
            if task != "modular":
                raise ValueError(
                    f"--task {task} is not read with --model (the model's twins train on the "
                    "packaged tiny-shakespeare through its tokenizer, or bytes); allowed: "
                    "--model without --task"
                )
            if text is not None:
                raise ValueError(
                    f"--text {text} is not read with --model (the packaged "
                    "tiny-shakespeare through the model's tokenizer, or bytes)"
                )
            n = (_twins.QUICK_STEPS if quick else 300) if steps is None else steps
            base = _twins.hf_twin(model, steps=n, block_size=block_size, dtype=dtype,
                                  batch_size=batch_size, compile=compile,
                                  gauge_draw=gauge_draw)  # fmt: skip
        elif task == "text":
            try:
                base = _twins.text_twin(
                    text, steps=(100 if quick else 300) if steps is None else steps, dtype=dtype,
                    batch_size=batch_size, compile=compile, gauge_draw=gauge_draw,
                )  # fmt: skip
            except _tasks_text.TextTooShort as exc:
                raise ValueError(
                    f"--text {text} has {exc.n_chars:,} characters; allowed: a text of at least "
                    f"{exc.needed:,} characters (a block of {exc.block_size} characters in both "
                    "the train and the validation split)"
                ) from None
            except (ValueError, FileNotFoundError) as exc:
                if is_validation_error(exc):  # an option's value, named by fail()
                    raise
                raise ValueError(f"--text {text}: {exc}") from None
        else:
            n = (_twins.QUICK_STEPS if quick else 1500) if steps is None else steps
            marks = (
                _twins.QUICK_CHECKPOINTS
                if quick and steps is None
                else _twins.TwinSpec().checkpoints
            )
            base = _twins.TwinSpec(steps=n, checkpoints=tuple(s for s in marks if s <= n),
                                   dtype=dtype, compile=compile, gauge_draw=gauge_draw)  # fmt: skip
        check_memory(pairs * len(names) * _twins.PLANNED_RUN_BYTES,
                     f"--pairs {pairs} × {len(names)} optimizer(s)")  # fmt: skip
        if task == "text" or model is not None:
            check_memory(batch_bytes(base), f"--batch-size {base.batch_size}")
        sweep = _twins.plan(names, base=base, pairs=pairs, merge=merge)
        total = len(sweep.specs())
    except (ValueError, FileNotFoundError, ImportError) as exc:
        raise fail(exc, OPTIONS) from None
    header = (
        f"{total} twin run(s) ({', '.join(names)} × {pairs} pair(s)), {base.steps} step(s) each, "
        f"{base.dtype}, {base.gauge_draw} gauge draw{', compiled' if base.compile else ''}"
        f"{_model_clause(base)}"
    )
    outcome = run_study(
        console, header, "twin runs", run_twins_study, names, base=base, pairs=pairs, merge=merge,
        sweep=sweep, options=run_options,
    )  # fmt: skip
    verdicts = [
        Text.assemble((rule, "bold"), f": {rest}")
        for rule, _, rest in (
            line.partition(": ") for line in _twins_views.verdict_lines(outcome.result)
        )
    ]
    print_outcome(console, outcome, _twins.tables(outcome.result), notes=verdicts, label_columns=2)
    if not quick or task != "modular" or steps is not None or model is not None:
        return
    more = [hint for hint, used in (("--dtype float64 for the float64 check", dtype == "float64"),
                                    ("--pairs 3 for more init × gauge draws", pairs > 1),
                                    ("--merge to test merging", merge)) if not used]  # fmt: skip
    console.print(
        "This was the quick look. The full protocol (1500 steps, docs/protocols.md §5): "
        f"[bold]gaugelab twins[/]{' — add ' + ', '.join(more) if more else ''}."
    )


def register(app: typer.Typer) -> None:
    """Add ``gaugelab twins`` to ``app``."""
    app.command()(guarded(twins))

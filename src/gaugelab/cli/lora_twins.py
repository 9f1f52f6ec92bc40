"""`gaugelab lora twins`: the twin triplet on LoRA fine-tuning.

Parses the options into a :class:`~gaugelab.experiments.lora_twins.run.LoraTwinSpec`, makes one
library call (:func:`gaugelab.experiments.lora_twins.run.run_lora_twins`: the pretrain run, one twin
run per optimizer, collect, report) and renders what it returns. Heavy imports (torch, the
experiments) happen inside the command function, so that ``gaugelab --help`` stays fast.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.text import Text

from gaugelab.cli._console import print_outcome, run_study, wide_console
from gaugelab.cli._errors import fail, guarded
from gaugelab.cli._options import RunOptions, check_dtype, study_command
from gaugelab.lazy import LazyModule

_lora_twins = LazyModule("gaugelab.experiments.lora_twins.run")

__all__ = ["LORA_TWIN_OPTIMIZERS", "register", "twins"]

LORA_TWIN_OPTIMIZERS = ("adam", "sgd", "sgd-compensated", "scaled-gd", "scalar-adam")
""":data:`gaugelab.experiments.lora_twins.run.LORA_TWIN_OPTIMIZERS` (written out: the help must not
import the experiment; tests/cli/test_lora_twins_cli.py checks that the two are equal)."""

OPTIONS = {
    "optimizer": "--optimizers", "steps": "--steps", "rank": "--rank", "lr": "--lr",
    "warmup_steps": "--warmup-steps", "scalar": "--scalar", "damping": "--damping",
    "batch_size": "--batch-size", "dtype": "--dtype", "noise_scale": "--noise-scale",
}  # fmt: skip
"""LoraTwinSpec fields → the options that set them (for its error messages)."""


def _damping(text: str) -> float | str:
    if text == "auto":
        return "auto"
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"--damping {text!r}; allowed: auto or a number >= 0") from None


@study_command
def twins(
    optimizers: Annotated[
        str,
        typer.Option(
            help="Comma-separated: adam, sgd, sgd-compensated (the scalar twin's rates "
            "(c² η_B, η_A/c²)), scaled-gd (undamped unless --damping), scalar-adam."
        ),
    ] = ",".join(LORA_TWIN_OPTIMIZERS),
    rank: Annotated[int, typer.Option(help="LoRA rank r (every projection adapted).")] = 4,
    steps: Annotated[
        int | None, typer.Option(help="Twin-phase steps (default 50; 6 with --quick).")
    ] = None,
    warmup_steps: Annotated[
        int | None,
        typer.Option(help="AdamW warm-up steps before the twins (default 20; 5 with --quick)."),
    ] = None,
    lr: Annotated[
        float | None,
        typer.Option(help="One learning rate for every optimizer (default: each its own)."),
    ] = None,
    scalar: Annotated[float, typer.Option(help="c of the scalar twin (cB, A/c).")] = 2.0,
    damping: Annotated[
        str, typer.Option(help="scaled-gd's damping: 0 (GL-equivariant), auto or λ.")
    ] = "0",
    noise_scale: Annotated[float, typer.Option(help="Noise twin: A, B += scale·randn.")] = 1e-7,
    batch_size: Annotated[int | None, typer.Option(help="Windows per minibatch.")] = None,
    quick: Annotated[
        bool,
        typer.Option(help="The quick pretrain (2 layers, d_model 32) and a few steps: seconds."),
    ] = False,
    dtype: Annotated[str, typer.Option(help="float32 (the protocol) or float64.")] = "float32",
    *,
    run_options: RunOptions,
) -> None:
    """Gauge twins of a LoRA adapter: does the optimizer see the adapter's factor basis?

    The character model of `gaugelab lora finetune` (its pretrain run, reused when stored)
    gets a rank-r adapter, warmed up for a few AdamW steps on the Python target domain (at
    B = 0 every twin is the base). From that state the base adapter, its GL(r) gauge twin
    (B G, G⁻¹ A), its scalar twin (c B, A/c), an identity twin and a noise twin are trained
    as one ensemble by each optimizer; at every checkpoint each twin's validation logits,
    update s·B A and update subspaces (principal angles) are compared with the base's, and
    the triplet engine reads each gauge twin against the noise twin: basis-sensitive,
    equivariant, equivariant-then-chaotic, nondeterministic or inconclusive.
    """
    console = wide_console()
    try:
        names = [n.strip() for n in optimizers.split(",") if n.strip()]
        unknown = [n for n in names if n not in LORA_TWIN_OPTIMIZERS]
        if unknown or not names or len(set(names)) != len(names):
            raise ValueError(
                f"--optimizers {optimizers!r}; allowed: distinct names of "
                f"{', '.join(LORA_TWIN_OPTIMIZERS)}"
            )
        check_dtype(dtype)

        fields: dict = dict(rank=rank, scalar=scalar, damping=_damping(damping), lr=lr,
                            noise_scale=noise_scale)  # fmt: skip
        for name, value in (("warmup_steps", warmup_steps), ("batch_size", batch_size)):
            if value is not None:
                fields[name] = value
        default = _lora_twins.LoraTwinSpec.model_fields["checkpoints"].default
        if steps is not None:
            marks = (0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)
            fields["steps"] = steps
            fields["checkpoints"] = tuple(s for s in marks if s <= steps) + (
                () if steps in marks else (steps,)
            )
        if quick:
            spec = _lora_twins.quick_twin_spec(pretrain={"dtype": dtype}, **fields)
        else:
            fields.setdefault("checkpoints", default)
            spec = _lora_twins.LoraTwinSpec(
                pretrain=_lora_twins.PretrainSpec(dtype=dtype), **fields
            )
        sweep = _lora_twins.plan(spec, names)
        total = len(sweep.specs())
    except (ValueError, FileNotFoundError) as exc:
        raise fail(exc, OPTIONS) from None

    p = spec.pretrain
    header = (
        f"pretrain ({p.n_layers} layers, d_model {p.d_model}, {p.steps} steps) + {total} twin "
        f"run(s) ({', '.join(names)}): rank {spec.rank}, {spec.warmup_steps} warm-up + "
        f"{spec.steps} twin steps, {p.dtype}"
    )
    outcome = run_study(
        console, header, "lora twin runs", _lora_twins.run_lora_twins, spec, names, sweep=sweep,
        options=run_options,
    )
    lines = []
    for row in outcome.result.completed:
        for twin, (verdict, why) in row.verdicts.items():
            label = "GL(r) twin" if twin == "gauge" else f"scalar twin (c = {spec.scalar:g})"
            lines.append(Text.assemble((row.optimizer, "bold"), f", {label}: {verdict} — {why}"))
        if (angles := _lora_twins.angle_line(outcome.result, row)) is not None:
            lines.append(Text(angles))
    print_outcome(
        console, outcome, _lora_twins.tables(outcome.result)[:1], notes=lines, label_columns=1
    )


def register(group: typer.Typer) -> None:
    """Add ``twins`` to ``group`` (``gaugelab lora``)."""
    group.command("twins")(guarded(twins))

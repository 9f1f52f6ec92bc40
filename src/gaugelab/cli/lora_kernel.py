"""`gaugelab lora kernel`: kernel diagnostics on the three matched LoRA paths.

Parses its options into a :class:`~gaugelab.experiments.lora_kernel.run.KernelSpec`, makes one
library call (:func:`gaugelab.experiments.lora_kernel.run.run_lora_kernel`) and renders what it
returns. Heavy imports (torch, the experiments) happen inside the command function, so that
``gaugelab --help`` stays fast.
"""

from __future__ import annotations

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

_lora_kernel = LazyModule("gaugelab.experiments.lora_kernel.run")
_lora_spec = LazyModule("gaugelab.experiments.lora.spec")

__all__ = ["kernel", "register"]


OPTIONS = {
    "optimizers": "--optimizers", "rank": "--rank", "steps": "--steps",
    "checkpoints": "--checkpoints", "probe_examples": "--probe-examples", "probes": "--probes",
    "gd_lr": "--gd-lr", "adam_lr": "--adam-lr", "batch_size": "--batch-size", "full": "--full",
    "seed": "--seed",
}  # fmt: skip
"""KernelSpec fields → the options of ``gaugelab lora kernel`` (for its error messages)."""


@study_command
def kernel(
    optimizers: Annotated[
        str, typer.Option(help="Optimizers, one run each: gd (plain SGD), adam.")
    ] = "gd,adam",
    full: Annotated[bool, typer.Option(help="Add the full fine-tuning path.")] = False,
    rank: Annotated[int, typer.Option(help="LoRA rank r (α = 2r).")] = 4,
    steps: Annotated[
        int | None, typer.Option(help="Steps of every path (default 200; 6 with --quick).")
    ] = None,
    checkpoints: Annotated[
        str | None,
        typer.Option(help="Diagnosed steps, from 0 (default 0,5,10,25,50,100,200)."),
    ] = None,
    probe_examples: Annotated[
        int | None, typer.Option(help="Probe windows N (default 16; 4 with --quick).")
    ] = None,
    probes: Annotated[
        int | None,
        typer.Option(help="Output probes Q of the estimators (default 8; 2 with --quick)."),
    ] = None,
    gd_lr: Annotated[float | None, typer.Option(help="gd learning rate (default 0.1).")] = None,
    adam_lr: Annotated[
        float | None, typer.Option(help="adam learning rate (default 0.002).")
    ] = None,
    batch_size: Annotated[int | None, typer.Option(help="Windows per minibatch (8).")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the LoRA factors and the stream.")] = 0,
    quick: Annotated[
        bool, typer.Option(help="The quick pretrain (2 layers, d_model 32) and 6 steps: seconds.")
    ] = False,
    dtype: Annotated[str, typer.Option(help="float32 (the protocol) or float64.")] = "float32",
    *,
    run_options: RunOptions,
) -> None:
    """Is LoRA fine-tuning in the kernel regime? Three matched paths, measured.

    From the `gaugelab lora finetune` pretrained character model, fine-tune on Python along
    three matched paths — nonlinear LoRA, the initialization-linearized LoRA model trained by
    the same optimizer, and the fixed-random-feature path that freezes the initially nonzero
    factor (--full adds full fine-tuning) — on the same minibatches, steps and probe set, once
    per optimizer. At every checkpoint: the linearization residual R_lin, Jacobian drift D_J,
    kernel drift D_K and kernel alignment A_K (estimated with JVPs, VJPs and seeded output
    probes, with standard errors; no Jacobian or kernel is formed), the linearized model's
    prediction gap, and target and retention validation loss. Adam's kernels use its
    preconditioner at the checkpoint (a declared approximation). The defaults take about ten
    minutes on two cores; see docs/commands/lora-kernel.md for what the diagnostics do not
    prove.
    """
    console = wide_console()
    try:
        check_dtype(dtype)
        names = tuple(x.strip() for x in optimizers.split(",") if x.strip())
        if (
            not names
            or any(n not in _lora_kernel.OPTIMIZERS for n in names)
            or len(set(names)) < len(names)
        ):
            raise ValueError(
                f"--optimizers {optimizers!r}; allowed: distinct names of "
                f"{', '.join(_lora_kernel.OPTIMIZERS)}"
            )
        fields: dict = {"optimizers": names, "full": full, "rank": rank, "seed": seed}
        given = {"steps": steps, "probe_examples": probe_examples, "probes": probes,
                 "gd_lr": gd_lr, "adam_lr": adam_lr, "batch_size": batch_size}  # fmt: skip
        fields.update({k: v for k, v in given.items() if v is not None})
        if checkpoints is not None:
            fields["checkpoints"] = comma_separated(checkpoints, "--checkpoints")
        elif steps is not None:  # the default cadence, cut at (and ending on) --steps
            default = _lora_kernel.KernelSpec.model_fields["checkpoints"].default
            fields["checkpoints"] = tuple(sorted({c for c in default if c < steps} | {steps}))
        if quick:
            spec = _lora_kernel.quick_spec(pretrain={"dtype": dtype}, **fields)
        else:
            spec = _lora_kernel.KernelSpec(pretrain=_lora_spec.PretrainSpec(dtype=dtype), **fields)
        sweep = _lora_kernel.plan(spec)
    except ValueError as exc:
        raise fail(exc, OPTIONS) from None
    p = spec.pretrain
    header = (
        f"pretrain ({p.n_layers} layers, d_model {p.d_model}, {p.steps} steps) + "
        f"{len(spec.optimizers)} run(s) ({', '.join(spec.optimizers)}) × paths "
        f"{', '.join(spec.paths())}, r = {spec.rank}, {spec.steps} steps, checkpoints "
        f"{list(spec.checkpoints)}, Q = {spec.probes}"
    )
    outcome = run_study(
        console, header, "kernel runs", _lora_kernel.run_lora_kernel, spec, sweep=sweep,
        options=run_options,
    )

    lines = [Text(line) for line in _lora_kernel.notes(outcome.result)]
    print_outcome(
        console, outcome, _lora_kernel.tables(outcome.result), notes=lines, label_columns=1
    )


def register(group: typer.Typer) -> None:
    """Add ``kernel`` to the ``gaugelab lora`` group."""
    group.command("kernel")(guarded(kernel))

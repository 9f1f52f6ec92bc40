"""``compose_lora``: compose stored or folder adapters, write the PEFT result, and measure the
rank ledger, the interference of every pair and — with base model and data — the validation
losses of the composition against each adapter alone.

Source: seed 003 §0x05 (composition), §0x05D (interference), §0x06L step 9 (target and
retention before claiming compatibility); docs/commands/lora-compare.md.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from gaugelab.adapters.checkpoint import BaseCheckpoint
from gaugelab.adapters.names import module_order
from gaugelab.adapters.writer import AdapterWriter
from gaugelab.experiments.lora.ladder import capture_inputs
from gaugelab.experiments.lora.sources import Found, find, open_store
from gaugelab.experiments.lora.sources import check_base_shapes as _check_source
from gaugelab.experiments.lora_compare.sources import losses, merged_model, target_batches
from gaugelab.lowrank.composition.adapters import (
    HEAD_TASKS,
    ComposedAdapter,
    ModuleLedger,
    compose_adapters,
)
from gaugelab.lowrank.composition.ledger import interference, staged_expansion_report
from gaugelab.lowrank.spectra.factored import factor_work_dtype
from gaugelab.study.store.db import DEFAULT_STORE_PATH, RunStore

__all__ = ["ComposeResult", "OutputInterference", "check_base_shapes", "compose_lora"]


@dataclass(frozen=True)
class OutputInterference:
    """Sampled-output interference of two sources in one module (``λ`` and ``s`` included)."""

    module: str
    first: int
    second: int
    cross_term: float
    cosine: float
    output_cross_term: float
    output_cosine: float
    n_samples: int


@dataclass
class ComposeResult:
    """What :func:`compose_lora` did.

    Attributes:
        sources: each source's label; weights: ``λ_j``; method, rank: as asked.
        out: the folder the PEFT adapter was written to.
        ledger: one :class:`~gaugelab.lowrank.composition.ledger.ModuleLedger` per module.
        outputs: sampled-output interference per module and pair (empty without data).
        losses: model → ``{"target[j]": …, "retention": …}`` validation losses (nats/char)
            of ``pretrained``, each source alone and ``composition``; ``target[j]`` is source
            ``j``'s own target corpus (empty without base model and data).
        stages: merge stage by stage in the order given (§0x05G): per stage ``t`` the sums
            over modules of the stage's rank, the running total's rank and the dimensions it
            added to the concatenated row / column spans, and (with data) the running sum's
            validation losses.
        notes: what was not computed, and why.
    """

    sources: list[str]
    weights: tuple[float, ...]
    method: str
    rank: int | None
    out: Path
    ledger: list[ModuleLedger]
    outputs: list[OutputInterference] = field(default_factory=list)
    losses: dict[str, dict[str, float]] = field(default_factory=dict)
    stages: list[dict[str, float | int | str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def compose_lora(
    sources: Sequence[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    *,
    store: str | os.PathLike[str] | RunStore = DEFAULT_STORE_PATH,
    weights: Sequence[float] | None = None,
    method: str = "cat",
    rank: int | None = None,
    seeds: Sequence[int | None] | None = None,
    study: str | None = None,
    evaluate: bool = True,
    samples: int = 2,
    allow_different_bases: bool = False,
    base: str | os.PathLike[str] | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> ComposeResult:
    """Compose adapters ``Σ λ_j s_j B_j A_j`` and write the result as a PEFT adapter.

    Args:
        sources: ``J ≥ 1`` adapters: PEFT folders, candidate labels (``lora r=4``) or
            ``lora-finetune`` run identities (LoRA only: a dense update has no factors).
        out: the folder to write (must not hold an adapter).
        store, study: where runs are looked up.
        weights: ``λ_j`` (default 1 each).
        method, rank: ``cat`` (exact) or ``svd`` at ``rank``.
        seeds: per source, which ensemble member (default each run's first).
        evaluate: measure losses and sampled-output interference when every source's base
            model and data are known (stored runs of one pretrain run).
        samples: validation batches per target corpus whose activations feed the
            sampled-output interference (each ``val_batch_size × block_size`` rows).
        allow_different_bases: compose adapters whose ``base_model_name_or_path`` differ.
        base: the base checkpoint of adapter folders (a ``.safetensors`` file or a Hugging
            Face folder): every module of every source is checked against it first.
        progress: called as ``progress(stage, i, n)`` after each of the ``n`` modules of
            each stage (``composing``, then ``staged expansion``).

    Returns:
        :class:`ComposeResult`.

    Raises:
        ValueError: fewer sources than weights or seeds, a dense source, different bases, bad
            method/rank (see :func:`gaugelab.lowrank.composition.adapters.compose_adapters`).
        ValueError: also a source module whose shape differs from its base model's, or
            that ``base`` lacks (checked before anything is written); a DoRA adapter (its
            update is no sum of ``s·B A`` pairs).
        FileExistsError: ``out`` holds an adapter already (checked before composing).

    The adapter is written module by module as it is composed (memory: one module, whatever
    the number of layers) into a temporary sibling folder, moved onto ``out`` when everything
    else is done: an error anywhere leaves ``out`` as it was.

    Source:
        seed 003 §0x05A–§0x05D, §0x05G.
    """
    func = "compose_lora"
    if not sources:
        raise ValueError(f"{func}: sources is empty; allowed: one or more adapters")
    seeds = list(seeds) if seeds is not None else [None] * len(sources)
    if len(seeds) != len(sources):
        raise ValueError(f"{func}: {len(seeds)} seeds for {len(sources)} sources")
    if Path(out).exists() and any(Path(out).iterdir()):
        raise FileExistsError(f"{out} is not empty; composed adapters are never overwritten")
    checkpoint = None if base is None else BaseCheckpoint.open(base)
    with open_store(store) as db:
        pairs = zip(sources, seeds, strict=True)
        found = [find(str(s), db, seed, study, func, base=checkpoint) for s, seed in pairs]
    for f in found:
        if f.source.method == "dora":
            raise ValueError(
                f"{func}: {f.label} is a DoRA adapter; its update m ⊙ (W₀ + s·B A)/‖·‖_c − W₀ "
                "is no sum of s·B A pairs, so it is not composed; allowed: LoRA adapters "
                "(lora inspect / compare read DoRA with --base)"
            )
        if f.source.adapter is None:
            raise ValueError(
                f"{func}: {f.label} is a {f.source.method} fine-tuning update, not an adapter; "
                "allowed: LoRA adapters (folders or LoRA runs)"
            )
    check_base_shapes(found, func)
    adapters = [f.source.adapter for f in found]
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        with AdapterWriter(tmp, owner=func) as writer:  # module by module, into tmp
            composed = compose_adapters(adapters, weights, method=method, rank=rank,  # type: ignore[arg-type]
                                        allow_different_bases=allow_different_bases,
                                        progress=progress, writer=writer)  # fmt: skip
        result = _result(found, composed, method, rank, out, evaluate, samples, progress)
        composed.write_ledger(tmp)
        if out.exists():
            out.rmdir()  # empty (checked first); a file put there meanwhile is not replaced
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return result


def _result(found: list[Found], composed: ComposedAdapter, method: str, rank: int | None,
            out: Path, evaluate: bool, samples: int,
            progress: Callable[[str, int, int], None] | None) -> ComposeResult:  # fmt: skip
    """The result of a composition: ledger, notes, staged expansion and (asked) losses."""
    adapters = [f.source.adapter for f in found]
    labels = [f.label for f in found]
    if len(set(labels)) < len(labels):  # the same candidate twice (other seeds, studies)
        labels = [f"[{j}] {label}" for j, label in enumerate(labels)]
    ledger = sorted(composed.ledger, key=lambda m: module_order(m.module))
    result = ComposeResult(labels, composed.weights, method, rank, out, ledger)
    heads = sorted({str(a.config.extra.get("task_type")) for a in adapters  # type: ignore[union-attr]
                    if a.config.extra.get("task_type") in HEAD_TASKS})  # type: ignore[union-attr]
    if heads:
        result.notes.append(
            f"task_type {', '.join(heads)} not written: PEFT's model for it expects the task "
            "head in the folder, and heads are not composed; load the composition with "
            "PeftModel.from_pretrained(model, folder)"
        )
    for label, adapter in zip(labels, adapters, strict=True):
        if adapter.others:  # type: ignore[union-attr]
            result.notes.append(
                f"{label}: {len(adapter.others)} tensor(s) besides the LoRA factors "  # type: ignore[union-attr]
                "(modules_to_save copies, biases) are not composed and not written"
            )
    if method == "svd":
        capped = [m for m in ledger if m.written_rank < rank]  # type: ignore[operator]
        if capped:
            kept = ", ".join(map(str, sorted({m.written_rank for m in capped})))
            result.notes.append(
                f"--method svd --rank {rank}: capped at the concatenated rank Σ r_j in "
                f"{len(capped)} of {len(ledger)} modules (written rank {kept} there)"
            )
    result.stages = _stages(found, composed.weights, labels, progress)
    if not evaluate:
        result.notes.append("losses and sampled-output interference: not asked for")
    else:
        unknown = [f.label for f in found if f.source.pretrain is None]
        bases = {f.source.pretrain.identity() for f in found if f.source.pretrain is not None}
        if unknown or len(bases) != 1:
            why = f"no base model and data for {', '.join(unknown)}" if unknown else "several bases"
            result.notes.append(f"losses and sampled-output interference: not computed ({why})")
        else:
            _evaluate(result, found, composed, samples)
    return result


def check_base_shapes(found: list[Found], func: str) -> None:
    """Every module of every source with a known base model exists there with the adapter's
    ``(d_out, d_in)``.

    Raises:
        ValueError: one line naming the source, the module and both shapes.
    """
    models: dict[str, torch.nn.Module] = {}
    for f in found:
        pretrain = f.source.pretrain
        if pretrain is None:
            continue
        key = pretrain.identity()
        if key not in models:
            models[key] = merged_model(f, {})
        _check_source(f.source, f.label, models[key], func)


def _stages(found: list[Found], weights: tuple[float, ...], labels: list[str],
            progress: Callable[[str, int, int], None] | None = None) -> list[dict]:  # fmt: skip
    """The staged expansion of every module, summed over modules, one row per stage."""
    adapters = [f.source.adapter for f in found]
    rows = [{"stage": t, "source": labels[t], "rank_stage": 0, "rank_total": 0, "new_row": 0,
             "new_column": 0} for t in range(len(found))]  # fmt: skip
    modules = dict.fromkeys(m for a in adapters for m in a.modules)  # type: ignore[union-attr]
    for i, m in enumerate(modules, 1):
        present = [j for j, a in enumerate(adapters) if m in a.modules]  # type: ignore[union-attr]
        parts = [adapters[j].modules[m] for j in present]  # type: ignore[union-attr]
        work = factor_work_dtype(*(X for p in parts for X in (p.B, p.A)))  # as compose_adapters
        stages = [(p.B.to(work), p.A.to(work), p.scale) for p in parts]
        report = staged_expansion_report(stages, [weights[j] for j in present],
                                         with_bases=False)  # fmt: skip
        for j, row in zip(present, report, strict=True):
            for key in ("rank_stage", "rank_total", "new_row", "new_column"):
                rows[j][key] += getattr(row, key)
        if progress is not None:
            progress("staged expansion", i, len(modules))
    return rows


def _evaluate(result: ComposeResult, found: list[Found], composed, samples: int) -> None:
    batches = [target_batches(f) for f in found]
    adapter = composed.adapter
    modules = list(adapter.modules)
    f64 = torch.float64

    def measure(deltas: dict[str, torch.Tensor]) -> dict[str, float]:
        model = merged_model(found[0], deltas)
        out = {}
        for j, b in enumerate(batches):
            out[f"target[{j}]"] = losses(model, b)["target"]
        out["retention"] = losses(model, batches[0])["retention"]
        return out

    result.losses["pretrained"] = measure({})
    for f, label in zip(found, result.sources, strict=True):
        own = {m: f.source.adapter.delta_weight(m).to(f64) for m in f.source.adapter.modules}  # type: ignore[union-attr]
        result.losses[f"{label} alone"] = measure(own)
    result.losses["composition"] = measure({m: adapter.delta_weight(m).to(f64) for m in modules})
    total: dict[str, torch.Tensor] = {}
    for t, f in enumerate(found):  # the running sum after each stage
        for m in f.source.adapter.modules:  # type: ignore[union-attr]
            delta = result.weights[t] * f.source.adapter.delta_weight(m).to(f64)  # type: ignore[union-attr]
            total[m] = total[m] + delta if m in total else delta
        result.stages[t].update(measure(dict(total)))
    base = merged_model(found[0], {})
    windows = [xy for b in batches for xy in b["target"][:samples]]
    inputs = capture_inputs(base, modules, windows)
    lam = result.weights
    for m in modules:
        present = [j for j, f in enumerate(found) if m in f.source.adapter.modules]  # type: ignore[union-attr]
        for a, b in itertools.combinations(present, 2):
            ma, mb = found[a].source.adapter.modules[m], found[b].source.adapter.modules[m]  # type: ignore[union-attr]
            first = (ma.B.to(f64), ma.A.to(f64), lam[a] * ma.scale)
            second = (mb.B.to(f64), mb.A.to(f64), lam[b] * mb.scale)
            ia = interference(first, second, inputs[m])
            result.outputs.append(OutputInterference(
                m, a, b, ia.cross_term, ia.cosine, ia.output_cross_term,  # type: ignore[arg-type]
                ia.output_cosine, ia.n_samples,  # type: ignore[arg-type]
            ))  # fmt: skip

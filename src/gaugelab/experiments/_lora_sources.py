"""Where :func:`gaugelab.experiments.lora.inspect_lora` finds an update: a PEFT adapter folder
(with its base model and data when it names a pretrain run of the store), a candidate label of a
stored study, or a run identity — every stored file read after its sha256 check.

Source: docs/commands/lora.md (inspect).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import safetensors.torch
import torch

from gaugelab.adapters import Adapter
from gaugelab.experiments._lora_data import (
    BASE_PREFIX,
    pretrain_weights,
    read_adapter_bytes,
)
from gaugelab.experiments._lora_spec import FinetuneSpec, PretrainSpec
from gaugelab.experiments._study import ArtifactError, verified_bytes, verified_json
from gaugelab.study.store import RunStore
from gaugelab.tasks import TwoDomainSpec

__all__ = ["CANDIDATE", "Source", "candidate_run", "resolve_path", "resolve_run"]


@dataclass
class Source:
    """What a source resolved to: updates, and (when known) base model and data."""

    source: str
    label: str
    method: str
    seed: int | None
    factors: dict[str, tuple[torch.Tensor, torch.Tensor, float]]  # LoRA: B, A, s
    dense: dict[str, torch.Tensor]  # full: module → ΔW (the 2-D linear updates)
    others: dict[str, torch.Tensor]  # full: every other parameter's delta
    dtype: torch.dtype
    pretrain: PretrainSpec | None = None
    weights: dict[str, torch.Tensor] | None = None
    logged: dict[str, float] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    adapter: Adapter | None = None  # the adapter read (LoRA), with its configuration
    target_corpus: TwoDomainSpec | None = None  # a run's fine-tuning target, when not pretrain's


def _from_adapter(adapter: Adapter, source: str, store: RunStore | None, **kw) -> Source:
    factors = {m: (a.B, a.A, a.scale) for m, a in adapter.modules.items()}
    dtype = next(iter(adapter.modules.values())).A.dtype
    found = Source(source, kw.pop("label", "adapter"), "lora", kw.pop("seed", None), factors,
                    {}, {}, dtype, **kw, adapter=adapter)  # fmt: skip
    if adapter.config.fan_in_fan_out:
        found.missing.append("fan_in_fan_out adapters are read as [d_out, d_in] updates")
    return found


def _pretrain_of(store: RunStore | None, identity: str) -> PretrainSpec | None:
    if store is None:
        return None
    try:
        row = store.run(identity)
    except ValueError:
        return None
    return PretrainSpec.model_validate(row.spec) if row.kind == PretrainSpec.kind else None


def resolve_path(path: Path, store: RunStore | None) -> Source:
    """The source of an adapter folder: its factors, and its pretrain run when the adapter's
    ``base_model_name_or_path`` names one completed in ``store`` (else why the ladder is
    not computed)."""
    adapter = Adapter.load(path)
    found = _from_adapter(adapter, str(path), store)
    name = adapter.config.base_model_name_or_path or ""
    why = (
        f"its base model ({name!r}) is not a gaugelab pretrain run"
        if not name.startswith(BASE_PREFIX)
        else f"its base model, pretrain run {name.removeprefix(BASE_PREFIX)[:12]}, is not "
        f"completed in {store.path if store else 'the store'}"
    )
    spec = None
    if name.startswith(BASE_PREFIX):
        spec = _pretrain_of(store, name.removeprefix(BASE_PREFIX))
    if spec is not None:
        try:
            found.weights, found.pretrain = pretrain_weights(store, spec), spec
        except (ValueError, ArtifactError) as exc:  # AdmissionError is a ValueError
            why = str(exc)
    if found.pretrain is None:
        found.missing.append(
            f"evidence ladder (output residuals on real activations, end-to-end losses): {why}; "
            "the weight-space columns need only the factors"
        )
    return found


CANDIDATE = re.compile(r"full|lora r=\d+")


def candidate_run(store: RunStore, label: str, study: str | None) -> str:
    """The identity of candidate ``label`` in ``study`` (default: the newest fine-tuning
    study of the store that has it)."""
    studies = [s for s in store.studies() if s.kind == FinetuneSpec.kind]
    if study is not None:
        studies = [s for s in studies if s.name == study]
        if not studies:
            raise ValueError(
                f"inspect_lora: study={study!r} is no fine-tuning study of {store.path}"
            )
    for row in reversed(studies):
        for run in store.runs(row.name):
            spec = run.spec
            name = "full" if spec["full"] else f"lora r={spec['ranks'][0]}"
            if name == label:
                return run.identity
    where = f"study {study!r}" if study else f"any fine-tuning study of {store.path}"
    raise ValueError(f"inspect_lora: no candidate {label!r} in {where}")


def resolve_run(store: RunStore, prefix: str, seed: int | None) -> Source:
    """The source of a stored fine-tuning run (id prefix), for ``seed`` (default its first).

    Raises:
        ValueError: not a fine-tuning run, not completed, or a seed it did not train.
    """
    row = store.run(prefix)
    if row.kind != FinetuneSpec.kind:
        raise ValueError(
            f"inspect_lora: run {row.identity[:12]} is a {row.kind!r} run; allowed: a "
            f"{FinetuneSpec.kind!r} run (a LoRA or full fine-tuning candidate) or an adapter "
            "folder"
        )
    spec = FinetuneSpec.model_validate(row.spec)
    done = [a.ordinal for a in store.attempts(row.identity) if a.termination == "completed"]
    if not done:
        raise ValueError(f"inspect_lora: run {row.identity[:12]} has not completed")
    seed = spec.seeds[0] if seed is None else seed
    if seed not in spec.seeds:
        raise ValueError(f"inspect_lora: seed={seed}; allowed: {', '.join(map(str, spec.seeds))}")
    artifacts = [a for a in store.artifacts(row.identity) if a.ordinal == done[-1]]
    result = verified_json(next(a for a in artifacts if a.kind == "result"))
    name = result["files"][str(seed)]
    method, rank = spec.candidate
    label = "full" if rank is None else f"lora r={rank}"
    e = spec.seeds.index(seed)
    curves = result["curves"]
    logged = {"logged_target": curves["target"][-1][e],
              "logged_retention": curves["retention"][-1][e]}  # fmt: skip
    weights = pretrain_weights(store, spec.pretrain)
    where = f"run {row.identity[:12]}"
    if method == "lora":
        files = {a.path.name: verified_bytes(a) for a in artifacts
                 if a.kind == "adapter" and a.path.parent.name == name}  # fmt: skip
        return _from_adapter(read_adapter_bytes(files), where, store, label=label, seed=seed,
                             pretrain=spec.pretrain, weights=weights, logged=logged,
                             target_corpus=spec.target_corpus)  # fmt: skip
    data = verified_bytes(next(a for a in artifacts if a.kind == "deltas" and a.path.name == name))
    deltas = safetensors.torch.load(data)
    targets = tuple(spec.targets)
    dense, others = {}, {}
    for key, value in deltas.items():
        module = key.removesuffix(".weight")
        if key.endswith(".weight") and value.dim() == 2 and module.rsplit(".", 1)[-1] in targets:
            dense[module] = value
        else:
            others[key] = value
    dtype = next(iter(dense.values())).dtype
    return Source(where, label, "full", seed, {}, dense, others, dtype, spec.pretrain, weights,
                   logged, target_corpus=spec.target_corpus)  # fmt: skip

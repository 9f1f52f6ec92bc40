"""Where ``lora inspect``, ``lora compare`` and ``lora compose`` find an update: a PEFT adapter
folder (with its base model and data when it names a pretrain run of the store), a candidate
label of a stored study, or a run identity — every stored file read after its sha256 check
(:func:`find` resolves a name; :func:`open_store` opens the store when there is one).

Source: docs/commands/lora.md (inspect), docs/commands/lora-compare.md.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import safetensors.torch
import torch

from gaugelab.adapters import Adapter
from gaugelab.adapters.checkpoint import BaseCheckpoint
from gaugelab.adapters.dora import dora_updates
from gaugelab.adapters.files import PREFIX as PEFT_PREFIX
from gaugelab.adapters.module import ScaledFactors
from gaugelab.experiments.lora.data import (
    BASE_PREFIX,
    pretrain_weights,
    read_adapter_bytes,
)
from gaugelab.experiments.lora.spec import FinetuneSpec, PretrainSpec
from gaugelab.study.store.db import RunStore
from gaugelab.study.store.results import ArtifactError, verified_bytes
from gaugelab.tasks import TwoDomainSpec

__all__ = ["CANDIDATE", "Found", "Source", "candidate_run", "find", "open_store", "resolve_path",
           "resolve_run"]  # fmt: skip


@dataclass
class Source:
    """What a source resolved to: updates, and (when known) base model and data."""

    source: str
    label: str
    method: str
    seed: int | None
    factors: Mapping[str, tuple[torch.Tensor, torch.Tensor, float]]  # LoRA: B, A, s
    dense: dict[str, torch.Tensor]  # full: module → ΔW (the 2-D linear updates)
    others: dict[str, torch.Tensor]  # full: every other parameter's delta
    dtype: torch.dtype
    pretrain: PretrainSpec | None = None
    weights: dict[str, torch.Tensor] | None = None
    logged: dict[str, float] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    adapter: Adapter | None = None  # the adapter read (LoRA), with its configuration
    target_corpus: TwoDomainSpec | None = None  # a run's fine-tuning target, when not pretrain's
    rtol: dict[str, float] = field(default_factory=dict)  # a dense update's own rank tolerance


def _from_adapter(adapter: Adapter, source: str, store: RunStore | None, **kw) -> Source:
    factors = ScaledFactors(adapter.modules)
    dtype = getattr(torch, next(iter(adapter.records.values())).dtype)
    found = Source(source, kw.pop("label", "adapter"), "lora", kw.pop("seed", None), factors,
                    {}, {}, dtype, **kw, adapter=adapter)  # fmt: skip
    if adapter.config.fan_in_fan_out:
        found.missing.append("fan_in_fan_out adapters are read as [d_out, d_in] updates")
    if adapter.embeddings:
        found.missing.append(
            f"embedding LoRA ({', '.join(sorted(adapter.embeddings))}): analysed as the pair "
            "s·B A = the transpose of the embedding table's update (same singular values)"
        )
    if adapter.others:
        listed = ", ".join(f"{k.removeprefix(PEFT_PREFIX)} {v}" for k, v in adapter.others.items())
        found.missing.append(
            f"not analysed: {len(adapter.others)} trained tensor(s) besides the LoRA factors "
            f"(modules_to_save copies, biases): {listed}"
        )
    return found


def _pretrain_of(store: RunStore | None, identity: str) -> PretrainSpec | None:
    if store is None:
        return None
    try:
        row = store.run(identity)
    except ValueError:
        return None
    return PretrainSpec.model_validate(row.spec) if row.kind == PretrainSpec.kind else None


def _dora(adapter: Adapter, source: str, base: BaseCheckpoint) -> Source:
    """A DoRA adapter's source: its effective updates, dense (no factors to analyse)."""
    updates = dora_updates(adapter, base)
    dense = {p: u.delta for p, u in updates.items()}
    rank = ", ".join(sorted({str(r.r) for r in adapter.records.values()}))
    found = Source(source, "dora", "dora", None, {}, dense, {}, torch.float64, adapter=None,
                   rtol={p: u.rtol for p, u in updates.items()})  # fmt: skip
    found.missing.append(
        f"the rank-r pair alone (DoRA, use_dora, r {rank}): analysed instead is the effective "
        f"update m ⊙ (W₀ + s·B A)/‖W₀ + s·B A‖_c − W₀ with W₀ from {base.path}, computed in "
        "float64; it is dense "
        "(rank up to min(d_out, d_in)); its numerical rank's tolerance is the round-off of "
        "W₀'s size (gaugelab.adapters.dora.dora_rtol)"
    )
    if adapter.others:
        listed = ", ".join(f"{k.removeprefix(PEFT_PREFIX)} {v}" for k, v in adapter.others.items())
        found.missing.append(f"not analysed: {len(adapter.others)} trained tensor(s) besides "
                             f"the DoRA factors and magnitudes: {listed}")  # fmt: skip
    return found


def resolve_path(path: Path, store: RunStore | None, base: BaseCheckpoint | None = None) -> Source:
    """The source of an adapter folder: its factors, and its pretrain run when the adapter's
    ``base_model_name_or_path`` names one completed in ``store`` (else why the ladder is
    not computed). With ``base`` (the user's base checkpoint) every module is checked
    against it, and a DoRA adapter is read: its effective updates, dense.

    Raises:
        ValueError: a DoRA adapter without ``base``; a module ``base`` lacks or of another
            shape (one line, :meth:`BaseCheckpoint.check`).
    """
    adapter = Adapter.load(path, dora=base is not None)
    if base is not None:
        base.check(adapter, str(path), "inspect_lora")
        if adapter.magnitudes:
            return _dora(adapter, str(path), base)
    found = _from_adapter(adapter, str(path), store)
    name = adapter.config.base_model_name_or_path or ""
    why = (
        f"its base model ({name!r}) is not a gaugelab pretrain run (lora inspect --base "
        "FOLDER --data FILE computes it on your own model and text)"
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
    if not store.completed(row.identity):
        raise ValueError(f"inspect_lora: run {row.identity[:12]} has not completed")
    seed = spec.seeds[0] if seed is None else seed
    if seed not in spec.seeds:
        raise ValueError(f"inspect_lora: seed={seed}; allowed: {', '.join(map(str, spec.seeds))}")
    result = store.result(row.identity).json()
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
        adapter = store.completed_files(row.identity, "adapter")
        files = {a.path.name: verified_bytes(a) for a in adapter if a.path.parent.name == name}
        return _from_adapter(read_adapter_bytes(files), where, store, label=label, seed=seed,
                             pretrain=spec.pretrain, weights=weights, logged=logged,
                             target_corpus=spec.target_corpus)  # fmt: skip
    deltas = safetensors.torch.load(store.result(row.identity, "deltas", name=name).data)
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


@dataclass
class Found:
    """A resolved source under the name it was asked for."""

    name: str
    source: Source

    @property
    def label(self) -> str:
        """What to call it in tables: ``lora r=4 seed 0``, ``full seed 1``, or the folder;
        a run named by its identity keeps it (``lora r=4 seed 0, run ec3253287961``)."""
        s = self.source
        if s.seed is None:
            return Path(self.name).name or self.name
        named = "" if self.name in (s.label, "full") else f", {s.source}"
        return f"{s.label} seed {s.seed}{named}"

    def updates(self) -> Mapping[str, object]:
        """Module → ``(B, A, s)`` float64 factors (LoRA) or a dense ``[d_out, d_in]`` float64
        update (full fine-tuning), upcast when a module is looked up (one module at a time in
        float64, never the whole adapter)."""
        return Float64Updates(self.source)


class Float64Updates(Mapping[str, object]):
    """A source's updates in float64, each upcast on lookup (see :meth:`Found.updates`)."""

    def __init__(self, source: Source) -> None:
        self._source = source
        self._keys = list(dict.fromkeys([*source.factors, *source.dense]))

    def __getitem__(self, module: str) -> object:
        f64 = torch.float64
        if module in self._source.dense:
            return self._source.dense[module].to(f64)
        B, A, s = self._source.factors[module]
        return B.to(f64), A.to(f64), s

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)


@contextmanager
def open_store(store: str | os.PathLike[str] | RunStore) -> Iterator[RunStore | None]:
    """The store (opened read-only-ish, ``create=False``), or ``None`` when the file is missing."""
    if isinstance(store, RunStore):
        yield store
        return
    if not Path(store).exists():
        yield None
        return
    db = RunStore(store, create=False)
    try:
        yield db
    finally:
        db.close()


_PREFIX = re.compile(r"[0-9a-f]{4,64}")


def _candidates(db: RunStore, study: str | None) -> list[str]:
    """The candidate labels of ``study`` (default: every fine-tuning study of ``db``)."""
    names: dict[str, None] = {}
    for row in db.studies():
        if row.kind == FinetuneSpec.kind and study in (None, row.name):
            for run in db.runs(row.name):
                spec = run.spec
                names["full" if spec["full"] else f"lora r={spec['ranks'][0]}"] = None
    return list(names)


def find(
    name: str,
    db: RunStore | None,
    seed: int | None,
    study: str | None,
    func: str,
    *,
    seed_name: str = "seed",
    base: BaseCheckpoint | None = None,
) -> Found:
    """Resolve ``name``: an existing path (a PEFT folder), a candidate label (``full``,
    ``lora r=4``) of ``study`` (default: the newest that has it), or a run identity prefix.
    ``base``, the user's base checkpoint, is for a folder (:func:`resolve_path`).

    Raises:
        ValueError: nothing matches (a name with ``/`` that does not exist: "no such adapter
            folder"; else what was looked for); the run is not a completed fine-tuning run;
            ``seed`` (named ``seed_name``) is not one of the run's seeds.
    """
    path = Path(name)
    if path.exists():
        try:
            found = Found(name, resolve_path(path, db, base))
        except ValueError as exc:
            raise ValueError(str(exc).replace("inspect_lora", func)) from None
        ignored = [f"{option}={value!r}" for option, value in ((seed_name, seed), ("study", study))
                   if value is not None]  # fmt: skip
        if ignored:  # a folder holds one adapter and belongs to no study
            found.source.missing.append(f"{', '.join(ignored)} ignored: {name} is an adapter "
                                        "folder, not a stored run")  # fmt: skip
        return found
    if "/" in name or os.sep in name:
        raise ValueError(f"{func}: no such adapter folder: {name}")
    if base is not None:
        raise ValueError(f"{func}: a base checkpoint is for adapter folders; {name!r} is a "
                         "stored run, whose base is its pretrain run")  # fmt: skip
    if db is None:
        raise ValueError(
            f"{func}: {name!r} is not an adapter folder, and there is no run store to look it "
            "up as a candidate label or run identity"
        )
    if CANDIDATE.fullmatch(name):
        try:
            identity = candidate_run(db, name, study)
        except ValueError as exc:
            if "no candidate" not in str(exc):
                raise ValueError(str(exc).replace("inspect_lora", func)) from None
            where = f"study {study!r}" if study else f"the fine-tuning studies of {db.path}"
            have = ", ".join(repr(c) for c in _candidates(db, study)) or "none"
            raise ValueError(f"{func}: no candidate {name!r} in {where}; allowed: {have}") from None
    elif _PREFIX.fullmatch(name):
        identity = name
    else:
        raise ValueError(
            f"{func}: {name!r} is no adapter folder, no candidate label (full, 'lora r=K') and "
            "no run identity prefix (4 to 64 lowercase hex characters)"
        )
    try:
        source = resolve_run(db, identity, seed)
    except ValueError as exc:
        message = str(exc).replace("inspect_lora", func)
        raise ValueError(message.replace("seed=", f"{seed_name}=")) from None
    return Found(name, source)


def check_base_shapes(source: Source, label: str, model: torch.nn.Module, func: str) -> None:
    """Every update of ``source`` names a linear module of ``model`` (its base) with the
    update's ``(d_out, d_in)``.

    Raises:
        ValueError: one line naming ``label``, the module and both shapes.
    """
    shapes = {m: (B.shape[0], A.shape[1]) for m, (B, A, _) in source.factors.items()}
    shapes |= {m: tuple(d.shape) for m, d in source.dense.items()}
    base = "its base model" + (f" (pretrain run {source.pretrain.identity()[:12]})"
                               if source.pretrain is not None else "")  # fmt: skip
    for m, (d_out, d_in) in shapes.items():
        try:
            weight = model.get_submodule(m).weight
        except AttributeError:
            raise ValueError(
                f"{func}: {label}: module {m!r} ({d_out}×{d_in}) is not a linear module of {base}"
            ) from None
        if tuple(weight.shape) != (d_out, d_in):
            raise ValueError(
                f"{func}: {label}: module {m!r} is {d_out}×{d_in} in the adapter but "
                f"{weight.shape[0]}×{weight.shape[1]} in {base}; allowed: adapters of that "
                "base model"
            )


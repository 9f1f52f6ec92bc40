"""Where ``lora compare`` / ``lora compose`` find their updates and, when known, the base model
and the validation data of each: a PEFT adapter folder, a candidate label of a stored study, or
a run identity (every stored file read after its sha256 check, through ``_lora_sources``).

Source: docs/commands/lora-compare.md.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from gaugelab.experiments._lora_data import base_model, eval_batches, finetune_corpus, load_corpus
from gaugelab.experiments._lora_ladder import mean_loss
from gaugelab.experiments._lora_sources import (
    CANDIDATE,
    Source,
    candidate_run,
    resolve_path,
    resolve_run,
)
from gaugelab.experiments._lora_spec import ALL_TARGETS, FinetuneSpec
from gaugelab.models import Transformer
from gaugelab.study.store import RunStore

__all__ = [
    "LAYER",
    "Found",
    "family",
    "find",
    "losses",
    "merged_model",
    "open_store",
    "order",
    "target_batches",
]  # fmt: skip

LAYER = re.compile(r"(?:^|\.)blocks\.(\d+)\.")
_FAMILIES = {"q_proj": "attention", "k_proj": "attention", "v_proj": "attention",
             "o_proj": "attention", "fc_in": "mlp", "fc_gate": "mlp", "fc_out": "mlp"}  # fmt: skip


def order(module: str) -> tuple[int, int, str]:
    """Block order, then the projections' order within a block, then the name."""
    match = LAYER.search(module)
    leaf = module.rsplit(".", 1)[-1]
    pos = ALL_TARGETS.index(leaf) if leaf in ALL_TARGETS else len(ALL_TARGETS)
    return (int(match[1]) if match else -1, pos, module)


def family(module: str) -> str:
    """``attention``, ``mlp`` or ``other``, from the module's last name."""
    return _FAMILIES.get(module.rsplit(".", 1)[-1], "other")


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

    def updates(self) -> dict[str, object]:
        """Module → ``(B, A, s)`` float64 factors (LoRA) or a dense ``[d_out, d_in]`` float64
        update (full fine-tuning)."""
        f64 = torch.float64
        out: dict[str, object] = {m: (B.to(f64), A.to(f64), s)
                                  for m, (B, A, s) in self.source.factors.items()}  # fmt: skip
        out.update({m: d.to(f64) for m, d in self.source.dense.items()})
        return out


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
) -> Found:
    """Resolve ``name``: an existing path (a PEFT folder), a candidate label (``full``,
    ``lora r=4``) of ``study`` (default: the newest that has it), or a run identity prefix.

    Raises:
        ValueError: nothing matches (a name with ``/`` that does not exist: "no such adapter
            folder"; else what was looked for); the run is not a completed fine-tuning run;
            ``seed`` (named ``seed_name``) is not one of the run's seeds.
    """
    path = Path(name)
    if path.exists():
        return Found(name, resolve_path(path, db))
    if "/" in name or os.sep in name:
        raise ValueError(f"{func}: no such adapter folder: {name}")
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


def target_batches(found: Found):
    """The fixed validation batches ``{retention, target}`` of the corpus this source was
    fine-tuned on (its ``target_corpus`` when set), or ``None`` when unknown."""
    s = found.source
    if s.pretrain is None:
        return None
    return eval_batches(finetune_corpus(s.pretrain, s.target_corpus), s.pretrain)


def merged_model(found: Found, deltas: dict[str, torch.Tensor]) -> Transformer:
    """The pretrained model of ``found`` with ``W₀ + ΔW`` in every module of ``deltas``."""
    s = found.source
    corpus = load_corpus(s.pretrain.corpus)  # type: ignore[union-attr]
    model = base_model(s.pretrain, s.weights, corpus.d_vocab)  # type: ignore[arg-type]
    with torch.no_grad():
        for module, delta in deltas.items():
            weight = model.get_submodule(module).weight
            weight += delta.to(weight.dtype)
    return model


def losses(model: Transformer, batches) -> dict[str, float]:
    """``{target, retention}`` mean validation loss (nats per character)."""
    return {d: mean_loss(model, batches[d]) for d in ("target", "retention")}

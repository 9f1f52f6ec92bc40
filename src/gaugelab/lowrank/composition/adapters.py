"""Static composition of PEFT adapters, written as a PEFT adapter (private; re-exported by
``gaugelab.lowrank.composition.ledger``)."""

from __future__ import annotations

import itertools
import json
import os
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from gaugelab.adapters import Adapter, AdapterConfig, AdapterModule
from gaugelab.adapters.writer import AdapterWriter
from gaugelab.lowrank.composition.ledger import compose_static, compress, interference
from gaugelab.lowrank.spectra.factored import factor_work_dtype
from gaugelab.models.lora import FactorRecord

__all__ = ["COMPOSITION_FILE", "DENSE_CHECK_LIMIT", "HEAD_TASKS", "METHODS", "WRITTEN",
           "ComposedAdapter", "ModuleLedger", "compose_adapters"]  # fmt: skip

METHODS: tuple[str, ...] = ("cat", "svd")
"""``cat``: concatenated factors, exact, width ``Σ r_j``; ``svd``: the composition's best
rank-``k`` approximation (its residual reported)."""
COMPOSITION_FILE = "gaugelab_composition.json"
"""The ledger written beside the PEFT files (PEFT ignores it)."""


WRITTEN = {torch.bfloat16: torch.float32, torch.float16: torch.float32}
"""The dtype a composition of half-precision sources is written in (others: the sources')."""

HEAD_TASKS = ("SEQ_CLS", "TOKEN_CLS", "QUESTION_ANS")
"""PEFT task types whose model adds the task head to ``modules_to_save`` and expects its weights
in the file (PEFT's load fails with a ``KeyError`` without them). A composition writes no head
(heads are not composed), so its config names none of these: PEFT loads it as a ``PeftModel``."""

DENSE_CHECK_LIMIT = 1 << 22
"""The largest ``m·n`` for which a composition is checked against the dense sum (4M entries:
32 MB per float64 matrix); a 4096 × 11008 projection of a 7B model is composed unchecked."""

@dataclass(frozen=True)
class PairRow:
    """Two sources' updates in one module: novelty (overlaps) and interference."""

    first: int
    second: int
    row_overlap: float
    column_overlap: float
    cross_term: float
    cosine: float


@dataclass(frozen=True)
class ModuleLedger:
    """The rank ledger and interference of one module's composition.

    Attributes:
        module: the module path; sources: indices of the adapters that adapt it.
        ranks, scales, coefficients: ``r_j``, ``s_j`` (each source's own ``(α, r, rsLoRA)``),
            ``λ_j``.
        rank_b_cat, rank_a_cat, rank_bound, measured_rank: as
            :class:`~gaugelab.lowrank.composition.ledger.StaticComposition`.
        max_abs_difference: ``B_cat A_cat`` against the dense sum, or ``None`` for a module
            larger than :data:`DENSE_CHECK_LIMIT` (the check would form two ``[m, n]``
            matrices; the concatenation is exact by construction).
        written_rank: the rank of the written module (``Σ r_j``, or ``k`` for ``svd``).
        relative_residual: ``‖ΔW − ΔW_k‖_F² / ‖ΔW‖_F²`` for ``svd`` (0.0 for ``cat``).
        pairs: one :class:`PairRow` per pair of sources.
    """

    module: str
    sources: tuple[int, ...]
    ranks: tuple[int, ...]
    scales: tuple[float, ...]
    coefficients: tuple[float, ...]
    rank_b_cat: int
    rank_a_cat: int
    rank_bound: int
    measured_rank: int
    max_abs_difference: float | None
    written_rank: int
    relative_residual: float
    pairs: tuple[PairRow, ...] = field(default_factory=tuple)


@dataclass
class ComposedAdapter:
    """A composed adapter (PEFT format) and its per-module ledger.

    Attributes:
        adapter: the :class:`~gaugelab.adapters.Adapter`; every module has ``s = 1``
            (``lora_alpha = r``, plain scale), its down factor carrying ``λ_j s_j``; in the
            sources' dtype, float32 for half-precision sources (:data:`WRITTEN`).
        ledger: one :class:`ModuleLedger` per module, in the adapters' module order.
        method, rank, weights: how it was composed.
        bases: each source's ``base_model_name_or_path``, in order (they differ only when
            composed with ``allow_different_bases``; the written config then names none).
        allow_different_bases: whether differing bases were allowed (recorded in
            :data:`COMPOSITION_FILE`).
    """

    adapter: Adapter
    ledger: list[ModuleLedger]
    method: str
    rank: int | None
    weights: tuple[float, ...]
    bases: tuple[str | None, ...] = ()
    allow_different_bases: bool = False

    def to_dict(self) -> dict:
        """The ledger as JSON-ready values."""
        return {"method": self.method, "rank": self.rank, "weights": list(self.weights),
                "bases": list(self.bases), "allow_different_bases": self.allow_different_bases,
                "modules": [asdict(m) for m in self.ledger]}  # fmt: skip

    def save(self, directory: str | os.PathLike[str]) -> Path:
        """Write the PEFT files and :data:`COMPOSITION_FILE` into ``directory``.

        Raises:
            FileExistsError: ``directory`` already holds an adapter (never overwritten).
        """
        return self.write_ledger(self.adapter.save(directory))

    def write_ledger(self, directory: str | os.PathLike[str]) -> Path:
        """Write :data:`COMPOSITION_FILE` into ``directory`` (the adapter written there).

        Raises:
            FileExistsError: the file exists (never overwritten).
        """
        with open(Path(directory) / COMPOSITION_FILE, "x", encoding="utf-8") as handle:
            json.dump(self.to_dict(), handle, indent=1, ensure_ascii=False, allow_nan=True)
        return Path(directory)


def _record(module: str, B: torch.Tensor, A: torch.Tensor, fan_in_fan_out: bool) -> FactorRecord:
    r = A.shape[0]
    return FactorRecord(
        module=module, d_in=A.shape[1], d_out=B.shape[0], r=r, alpha=float(r), use_rslora=False,
        scale=1.0, init="given", zero_factor="none", down_distribution="given",
        down_variance=None, up_distribution="given", up_variance=None, seed=None,
        dtype=str(A.dtype).split(".")[-1], fan_in_fan_out=fan_in_fan_out,
    )  # fmt: skip


def compose_adapters(
    adapters: Sequence[Adapter],
    weights: Sequence[float] | None = None,
    *,
    method: str = "cat",
    rank: int | None = None,
    rtol: float | None = None,
    allow_different_bases: bool = False,
    progress: Callable[[str, int, int], None] | None = None,
    writer: AdapterWriter | None = None,
) -> ComposedAdapter:
    """Compose adapters ``Σ_j λ_j s_j B_j A_j`` module by module (union of their modules).

    Each source's scale ``s_j`` comes from its own ``(α, r_j, rsLoRA)`` (the module's factor
    record), so composing rsLoRA adapters keeps their scales; the result is written with
    ``s = 1`` and ``λ_j s_j`` folded into the down factor. A module adapted by only some
    sources composes those. GPT-2 ``Conv1D`` adapters (``fan_in_fan_out``) store their factors
    as any other (``A [r, d_in]``, ``B [d_out, r]``; only the base weight is ``[d_in, d_out]``
    and PEFT's ``ΔW`` is ``(s·B A)ᵀ``), so they compose alike and are written with
    ``fan_in_fan_out`` true.

    Args:
        adapters: ``J ≥ 1`` :class:`~gaugelab.adapters.Adapter` of one base model.
        weights: ``λ_j`` (default all 1).
        method: ``cat`` (exact) or ``svd`` (rank ``rank``, with the residual).
        rank: ``k ≥ 1`` for ``svd`` (capped per module at its composition's width).
        rtol: numerical-rank tolerance of the ledger (default as ``compose_static``).
        allow_different_bases: compose adapters whose ``base_model_name_or_path`` differ
            (off: such a sum is not meaningful in one coordinate system, §0x05A).
        progress: called as ``progress("composing", i, n)`` after each of the ``n`` modules.
        writer: write each composed module as it is made, and not keep it (memory: one
            module, whatever the number of layers); the adapter returned then reads its
            modules from the written folder. None: kept in memory.

    Returns:
        :class:`ComposedAdapter`.

    Raises:
        ValueError: no adapters, weights of another length, an unknown method, ``svd``
            without a rank ≥ 1 (or ``cat`` with one), a DoRA adapter, adapters that mix
            ``fan_in_fan_out``, different base models (unless allowed), a module of different
            shapes or dtypes across sources.

    Source:
        seed 003 §0x05A–§0x05D, §0x05G; PEFT's adapter format.
    """

    func = "compose_adapters"
    if not adapters:
        raise ValueError(f"{func}: adapters is empty; allowed: at least one Adapter")
    weights = tuple(1.0 for _ in adapters) if weights is None else tuple(weights)
    if len(weights) != len(adapters):
        raise ValueError(f"{func}: {len(weights)} weights for {len(adapters)} adapters")
    if method not in METHODS:
        raise ValueError(f"{func}: method={method!r}; allowed: {', '.join(METHODS)}")
    if method == "svd" and (isinstance(rank, bool) or not isinstance(rank, int) or rank < 1):
        raise ValueError(f"{func}: method='svd' needs rank >= 1, got rank={rank!r}")
    if method == "cat" and rank is not None:
        raise ValueError(f"{func}: rank={rank} is for method='svd'; 'cat' keeps Σ r_j")
    if dora := [j for j, a in enumerate(adapters) if a.magnitudes]:
        raise ValueError(
            f"{func}: adapters[{dora[0]}] is a DoRA adapter (use_dora); its update m ⊙ (W₀ + "
            "s·B A)/‖W₀ + s·B A‖_c − W₀ is no sum of s·B A pairs; allowed: LoRA adapters"
        )
    layouts = {a.config.fan_in_fan_out for a in adapters}
    if len(layouts) > 1:
        flags = ", ".join(f"adapters[{j}]: {a.config.fan_in_fan_out}"
                          for j, a in enumerate(adapters))  # fmt: skip
        raise ValueError(
            f"{func}: the adapters mix fan_in_fan_out ({flags}); one base model stores each "
            "weight in one layout; allowed: all true (GPT-2 Conv1D) or all false"
        )
    bases = {a.config.base_model_name_or_path for a in adapters}
    if len(bases) > 1 and not allow_different_bases:
        raise ValueError(
            f"{func}: the adapters name different base models {sorted(map(str, bases))}; a sum "
            "of updates of different bases is not one operator (allow_different_bases=True to "
            "compose anyway)"
        )
    fan_in_fan_out = layouts.pop()  # the factors are [d_out, r], [r, d_in] in both layouts
    modules = list(dict.fromkeys(m for a in adapters for m in a.modules))
    out: dict[str, AdapterModule] = {}
    records: dict[str, FactorRecord] = {}
    embeddings = frozenset(m for a in adapters for m in a.embeddings)
    ledger = []
    for module in modules:
        idx = tuple(j for j, a in enumerate(adapters) if module in a.modules)
        parts = [adapters[j].modules[module] for j in idx]
        kinds = [(p.B.shape[0], p.A.shape[1], p.A.dtype) for p in parts]
        if len(set(kinds)) > 1:
            found = "; ".join(f"adapters[{j}]: {m}×{n} {str(d).split('.')[-1]}"
                              for j, (m, n, d) in zip(idx, kinds, strict=True))  # fmt: skip
            raise ValueError(
                f"{func}: module {module!r} differs across the adapters ({found}); allowed: "
                "one shape and dtype (cast the adapters to one dtype first)"
            )
        lam = [float(weights[j]) for j in idx]
        m, n, dtype = kinds[0]
        # half precision: float32, in which LAPACK runs anyway; far out of range: float64
        work = factor_work_dtype(*(X for p in parts for X in (p.B, p.A)))
        factors = [(p.B.to(work), p.A.to(work), p.scale) for p in parts]
        comp = compose_static(factors, lam, rtol=rtol, check=m * n <= DENSE_CHECK_LIMIT)
        B, A, residual = comp.B, comp.A, 0.0
        if method == "svd":
            small = compress(comp, min(rank, comp.B.shape[1]))  # type: ignore[type-var]
            B, A, residual = small.B, small.A, small.relative_residual
        # written in the sources' dtype, half precision in float32: λ_j s_j folded into B is
        # not exact in bfloat16 (1.8e-3 relative for λ = 0.3, 0.7), the sum would not be
        B, A = B.to(WRITTEN.get(dtype, dtype)), A.to(WRITTEN.get(dtype, dtype))
        pairs = []
        for a, b in itertools.combinations(range(len(idx)), 2):
            ia = interference((*factors[a][:2], lam[a] * parts[a].scale),
                              (*factors[b][:2], lam[b] * parts[b].scale))  # fmt: skip
            pairs.append(PairRow(idx[a], idx[b], float(ia.row.min_rank_overlap),
                                 float(ia.column.min_rank_overlap), ia.cross_term,
                                 ia.cosine))  # fmt: skip
        records[module] = record = _record(module, B, A, fan_in_fan_out)
        if writer is None:
            out[module] = AdapterModule(A.contiguous(), B.contiguous(), record)
        else:
            writer.add(module, A, B, record.to_dict(), embedding=module in embeddings)
        ledger.append(ModuleLedger(
            module, idx, comp.ranks, comp.scales, comp.coefficients, comp.rank_b_cat,
            comp.rank_a_cat, comp.rank_bound, comp.measured_rank, comp.max_abs_difference,
            A.shape[0], residual, tuple(pairs),
        ))  # fmt: skip
        if progress is not None:
            progress("composing", len(records), len(modules))
    r = Counter(m.r for m in records.values()).most_common(1)[0][0]
    tasks = {a.config.extra.get("task_type") for a in adapters}  # AutoPeftModelFor… reads it
    task_type = next(iter(tasks)) if len(tasks) == 1 else None
    task_type = None if task_type in HEAD_TASKS else task_type  # no head is written
    exact = {p: "^" + re.escape(p) for p in records}
    config = AdapterConfig(
        r=r, lora_alpha=float(r), target_modules=tuple(records),
        rank_pattern={exact[p]: m.r for p, m in records.items() if m.r != r},
        alpha_pattern={exact[p]: float(m.r) for p, m in records.items() if m.r != r},
        fan_in_fan_out=fan_in_fan_out,
        base_model_name_or_path=next(iter(bases)) if len(bases) == 1 else None,
        extra={"bias": "none", "inference_mode": True, "init_lora_weights": True,
               "lora_bias": False, "modules_to_save": None, "task_type": task_type,
               "use_dora": False},
    )  # fmt: skip
    named = tuple(a.config.base_model_name_or_path for a in adapters)
    if writer is None:
        adapter = Adapter(out, config, embeddings=embeddings)
    else:
        adapter = Adapter.load(writer.finish(config.to_json_dict()))
    return ComposedAdapter(adapter, ledger, method, rank, weights, named,
                           allow_different_bases)  # fmt: skip

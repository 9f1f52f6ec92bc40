"""The structural ledger of a low-rank study manifest (seed 003 §0x00K).

Used by :func:`gaugelab.study.release.study_checks.validate_study_manifest`; re-exported by
:mod:`gaugelab.study.release.study_manifest`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from gaugelab.study.release.study_errors import FN, LedgerError

__all__ = ["check_ledger", "study_ledger"]


def study_ledger(manifest: Any) -> dict[str, int | tuple[int, ...]]:
    """The structural ledger derived from a manifest's objects (nothing else is computed).

    Keys: ``D`` (ambient parameter coordinates); ``d[<u>]`` (global subspace coordinates, per
    subspace object); per base matrix ``dense[<W>] = m·n``; per LoRA product of rank ``r`` on an
    ``m × n`` target ``factors[<ΔW>] = r(m + n)``, ``manifold[<ΔW>] = q(m + n − q)`` (the
    generic rank-``q`` matrix manifold, ``q = min(r, m, n)``) and ``gauge[<ΔW>] = r²``; per
    split ``rows[<split>]``; per output trace ``outputs[<F>] = N·C``; per Jacobian and kernel
    ``shape[<J>]``, ``shape[<K>]``.

    Args:
        manifest: a manifest whose shapes are valid.

    Returns:
        Key → integer or shape tuple.

    Source: seed 003 §0x00K (the teaching ledger: 24, 3, 24, 20, 16, 4, 6/4/4, 24, [24,24],
    [24,24]).
    """
    out: dict[str, int | tuple[int, ...]] = {"D": manifest.parameter_schema.ambient()}
    out |= {f"d[{p.object_id}]": p.dim for p in manifest.parameter_objects
            if p.kind == "subspace"}  # fmt: skip
    for w in manifest.matrix_objects:
        rows, cols = w.shape
        if w.kind == "base":
            out[f"dense[{w.object_id}]"] = rows * cols
        elif w.kind == "product":
            r, q = w.rank, min(w.rank, rows, cols)
            out[f"factors[{w.object_id}]"] = r * (rows + cols)
            out[f"manifold[{w.object_id}]"] = q * (rows + cols - q)
            out[f"gauge[{w.object_id}]"] = r * r
    out |= {f"rows[{s.split_id}]": s.rows for s in manifest.dataset_objects}
    for f in manifest.function_objects:
        if f.kind == "outputs":
            out[f"outputs[{f.object_id}]"] = math.prod(f.shape)
        elif f.kind in ("jacobian", "kernel"):
            out[f"shape[{f.object_id}]"] = tuple(f.shape)
    return out


def check_ledger(m: Any) -> None:
    """Refuse a declared ledger that is not exactly :func:`study_ledger` of the manifest.

    Raises:
        LedgerError: a line missing or extra, or a value that differs.
    """
    if not isinstance(m.ledger, Mapping):
        raise LedgerError(f"{FN}: ledger={m.ledger!r}; allowed: a mapping line → value")
    derived = study_ledger(m)
    declared = {k: tuple(v) if isinstance(v, (list, tuple)) else v for k, v in m.ledger.items()}
    missing = [k for k in derived if k not in declared]
    extra = [k for k in declared if k not in derived]
    if missing or extra:
        raise LedgerError(f"{FN}: ledger lacks {missing} and has {extra}; allowed: exactly the "
                          f"derived lines {list(derived)}")  # fmt: skip
    for k, v in derived.items():
        if declared[k] != v:
            raise LedgerError(f"{FN}: ledger[{k!r}]={declared[k]!r}; allowed: {v!r}, derived "
                              "from the objects")  # fmt: skip

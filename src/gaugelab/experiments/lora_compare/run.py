"""Comparing and composing adapters: gauge-invariant subspace similarity and static composition.

:func:`compare_lora` answers "do these two adapters learn the same thing?" module by module, for
two PEFT adapter folders, two stored fine-tuning runs (candidate labels or identities; a LoRA
run or a full fine-tuning run, whose dense update is compared the same way), with every number
between *spans* of the update ``ΔW = s·B A`` — never raw factor entries, which the
``GL(r)`` gauge ``(B G, G⁻¹ A)`` changes freely (seed 003 §0x06A): the row space (what the
update reads) and the column space (what it writes), the principal angles, projection mass,
min-rank overlap, both directed coverages, chordal and projector distances, the Haar baseline
of the same ranks and dimension (and on request a seeded Monte-Carlo null), the factor spans
beside the update spans, and the LoRA paper's φ per module family against the random
baseline. :func:`compose_lora` composes adapters ``Σ λ_j s_j B_j A_j`` (concatenated factors,
or their SVD at a chosen rank), writes the result as a PEFT adapter and reports the rank
ledger, the interference of every pair (Frobenius cross term, sampled-output cross term on
real activations) and, when the base model and data are known, the validation losses of the
composition against each adapter alone. ``run_lora_compare`` / ``run_lora_compose`` add the
HTML report (:mod:`~gaugelab.experiments.lora_compare.views`).

Source: seed 003 §0x05 (composition), §0x06 (subspace similarity); hu2021lora §7.2, App. G.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from gaugelab.adapters.checkpoint import BaseCheckpoint
from gaugelab.adapters.names import module_order, parse_module_name
from gaugelab.experiments.lora.sources import find, open_store
from gaugelab.experiments.lora_compare.compose import ComposeResult, compose_lora
from gaugelab.experiments.lora_compare.results import SIDES, CompareResult, ModuleComparison
from gaugelab.experiments.lora_compare.views import compare_report, compose_report
from gaugelab.lowrank.subspaces.compare import (
    UpdateBases,
    haar_null,
    phi_matrix,
    principal_angles,
    update_bases,
)
from gaugelab.study.report.folders import new_report_dir, refuse_overwrite
from gaugelab.study.store.db import DEFAULT_STORE_PATH, RunStore

__all__ = ["CompareResult", "ComposeResult", "ModuleComparison", "compare_lora", "compose_lora",
           "run_lora_compare", "run_lora_compose"]  # fmt: skip

def _bases(update: object, policy: str | int, rho: float, dense_policy: str, dense_rho: float,
           dtype: torch.dtype, module: str) -> UpdateBases:  # fmt: skip
    if isinstance(update, torch.Tensor):
        return update_bases(update, policy=dense_policy, rho=dense_rho, computed_in=dtype,
                            matrix_id=module)  # fmt: skip
    return update_bases(update, policy=policy, rho=rho, computed_in=dtype, matrix_id=module)


def _identity(found) -> tuple[str, int | None]:
    """Which update a source is: its folder (resolved) or run, and seed."""
    s = found.source
    return (str(Path(s.source).resolve()) if s.seed is None else s.source, s.seed)


def _phi(Q_a: torch.Tensor, Q_b: torch.Tensor, r_a: int, r_b: int, cap: int) -> list:
    i, j = min(r_a, cap), min(r_b, cap)
    if not i or not j:
        return []
    return phi_matrix(Q_a[:, :i], Q_b[:, :j]).phi.tolist()


def compare_lora(
    a: str | os.PathLike[str],
    b: str | os.PathLike[str],
    *,
    store: str | os.PathLike[str] | RunStore = DEFAULT_STORE_PATH,
    seed_a: int | None = None,
    seed_b: int | None = None,
    study: str | None = None,
    policy: str | int = "numerical",
    rho: float = 0.99,
    dense_policy: str = "energy",
    dense_rho: float = 0.9,
    phi_max: int = 64,
    null_samples: int = 0,
    null_seed: int = 0,
    against_full: bool = False,
    base: str | os.PathLike[str] | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> CompareResult:
    """Compare two adapters (or an adapter and a full fine-tuning update) module by module.

    Args:
        a, b: each a PEFT adapter folder, a candidate label (``full``, ``lora r=4``) of
            ``study`` (default: the newest fine-tuning study of ``store`` that has it), or a
            ``lora-finetune`` run identity prefix. An existing path wins.
        store: the run store (path or open :class:`RunStore`).
        seed_a, seed_b: which ensemble member of a run (default: its first).
        study: where candidate labels are looked up.
        policy, rho: the rank policy of LoRA updates (:func:`~gaugelab.lowrank.subspaces.compare.
            update_bases`: ``numerical`` with the float32 tolerance of the factors' dtype,
            ``energy`` at ``rho``, ``algebraic``, ``configured``, or an int).
        dense_policy, dense_rho: the policy of dense (full fine-tuning) updates: by default
            their 90%-energy rank, since the numerical rank of ``W_ft − W₀`` in float32 is
            full (round-off of the weights' own size).
        phi_max: the largest ``i`` and ``j`` of φ.
        null_samples: ``> 0``: also a Monte-Carlo Haar null of that many draws per module and
            side (seeded ``null_seed``).
        against_full: ``b`` must be a full fine-tuning run (``--against-full``).
        base: the base checkpoint of adapter folders (as :func:`~gaugelab.experiments.lora.
            inspect.inspect_lora`): modules are checked against it, and a DoRA adapter is
            compared through its effective update, dense (``dense_policy``).
        progress: called as ``progress("comparing", i, n)`` after each of the ``n`` shared
            modules.

    Returns:
        :class:`CompareResult` (float64 throughout; modules both adapt, in block order).

    Raises:
        ValueError: a source that resolves to nothing, a DoRA adapter without ``base``, a
            module ``base`` lacks or of another shape, no shared module, a module of
            different shapes, ``against_full`` and ``b`` not full fine-tuning, bad options
            (an int ``policy`` < 1, ``rho`` or ``dense_rho`` outside ``(0, 1]``).
        ArtifactError: a stored file changed since it was written.

    Source:
        seed 003 §0x06B–§0x06L; hu2021lora §7.2 (φ).
    """
    func = "compare_lora"
    if isinstance(phi_max, bool) or not isinstance(phi_max, int) or phi_max < 1:
        raise ValueError(f"{func}: phi_max={phi_max!r}; allowed: an int >= 1")
    if isinstance(null_samples, bool) or not isinstance(null_samples, int) or null_samples < 0:
        raise ValueError(f"{func}: null_samples={null_samples!r}; allowed: 0, or an int >= 2")
    if not isinstance(policy, str) and (isinstance(policy, bool) or policy < 1):
        raise ValueError(
            f"{func}: policy={policy!r}; allowed: numerical, algebraic, energy, configured, or "
            "an integer k >= 1"
        )
    for name, value in (("rho", rho), ("dense_rho", dense_rho)):
        if not isinstance(value, (int, float)) or not 0 < value <= 1:
            raise ValueError(f"{func}: {name}={value:g}; allowed: (0, 1]")
    checkpoint = None if base is None else BaseCheckpoint.open(base)
    with open_store(store) as db:
        fa = find(str(a), db, seed_a, study, func, seed_name="seed_a", base=checkpoint)
        fb = find(str(b), db, seed_b, study, func, seed_name="seed_b", base=checkpoint)
    if against_full and fb.source.method != "full":
        raise ValueError(
            f"{func}: against_full={b!r} is a {fb.source.method} fine-tuning update "
            f"({fb.label}); allowed: a full fine-tuning run ('full' or its run identity)"
        )
    ua, ub = fa.updates(), fb.updates()
    shared = [m for m in ua if m in ub]
    if not shared:
        raise ValueError(f"{func}: {fa.label} and {fb.label} adapt no common module")
    notes: list[str] = []
    if _identity(fa) == _identity(fb):
        notes.append(f"{fa.label} and {fb.label} are the same update: every angle is 0 up to "
                     "round-off")  # fmt: skip
    only = sorted(set(ua) ^ set(ub))
    if only:
        notes.append(f"adapted by one side only, not compared: {', '.join(only)}")
    modules = []
    for m in sorted(shared, key=module_order):
        x_a, x_b = ua[m], ub[m]
        ba = _bases(x_a, policy, rho, dense_policy, dense_rho, fa.source.dtype, m)
        bb = _bases(x_b, policy, rho, dense_policy, dense_rho, fb.source.dtype, m)
        if ba.column.shape[0] != bb.column.shape[0] or ba.row.shape[0] != bb.row.shape[0]:
            raise ValueError(
                f"{func}: module {m!r} is {ba.column.shape[0]}×{ba.row.shape[0]} in {fa.label} "
                f"and {bb.column.shape[0]}×{bb.row.shape[0]} in {fb.label}"
            )
        r_a, r_b = int(ba.rank), int(bb.rank)
        sides = {s: principal_angles(getattr(ba, s), getattr(bb, s), rank_s=ba.rank,
                                     rank_t=bb.rank) for s in SIDES}  # fmt: skip
        factor = {s: None for s in SIDES}
        if ba.factor_row is not None and bb.factor_row is not None:
            for s in SIDES:
                factor[s] = principal_angles(
                    getattr(ba, f"factor_{s}"), getattr(bb, f"factor_{s}"),
                    rank_s=getattr(ba, f"factor_{s}_rank"), rank_t=getattr(bb, f"factor_{s}_rank"),
                ).to_dict()  # fmt: skip
        nulls = {s: None for s in SIDES}
        if null_samples and min(r_a, r_b) > 0:
            dims = {"row": ba.row.shape[0], "column": ba.column.shape[0]}
            nulls = {s: haar_null(dims[s], r_a, r_b, samples=null_samples, seed=null_seed)
                     for s in SIDES}  # fmt: skip
        name = parse_module_name(m)
        modules.append(ModuleComparison(
            module=m, layer=name.layer, family=name.family,
            shape=(ba.column.shape[0], ba.row.shape[0]),
            configured_a=None if isinstance(x_a, torch.Tensor) else x_a[1].shape[0],
            configured_b=None if isinstance(x_b, torch.Tensor) else x_b[1].shape[0],
            rank_a=r_a, rank_b=r_b, policy_a=ba.policy.policy_id, policy_b=bb.policy.policy_id,
            row=sides["row"].to_dict(), column=sides["column"].to_dict(),
            factor_row=factor["row"], factor_column=factor["column"],
            phi_row=_phi(ba.row, bb.row, r_a, r_b, phi_max),
            phi_column=_phi(ba.column, bb.column, r_a, r_b, phi_max),
            null_row=nulls["row"], null_column=nulls["column"],
        ))  # fmt: skip
        if progress is not None:
            progress("comparing", len(modules), len(shared))
    policy_text = f"{policy}" + (f" (rho={rho})" if policy == "energy" else "")
    if {"full", "dora"} & {fa.source.method, fb.source.method}:
        policy_text += f"; dense updates: {dense_policy}" + (
            f" (rho={dense_rho})" if dense_policy == "energy" else ""
        )
    return CompareResult(fa.label, fb.label, fa.source.source, fb.source.source,
                         fa.source.method, fb.source.method, policy_text, rho, modules,
                         notes)  # fmt: skip


def _report_dir(store, name: str, out: str | os.PathLike[str] | None) -> Path:
    """``out``, or a new report folder ``name`` beside the store."""
    if out is not None:
        return Path(out)
    parent = Path(store.path if isinstance(store, RunStore) else store).parent / "reports"
    return new_report_dir(parent, study=name)


def run_lora_compare(
    a: str | os.PathLike[str],
    b: str | os.PathLike[str],
    *,
    store: str | os.PathLike[str] | RunStore = DEFAULT_STORE_PATH,
    report_dir: str | os.PathLike[str] | None = None,
    write_report: bool = True,
    **options,
) -> tuple[CompareResult, Path | None]:
    """:func:`compare_lora` (``options`` as there), then its report (``report.html``, the φ
    heatmaps against the random baseline, ``compare.json``).

    Raises:
        FileExistsError: ``report_dir`` already holds a comparison (checked first).
        ValueError, ArtifactError: as :func:`compare_lora`.
    """
    if report_dir is not None and write_report:
        refuse_overwrite(report_dir)
    result = compare_lora(a, b, store=store, **options)
    if not write_report:
        return result, None
    return result, compare_report(result, _report_dir(store, f"compare-{result.a}-vs-{result.b}",
                                                      report_dir))  # fmt: skip


def run_lora_compose(
    sources: Sequence[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    *,
    store: str | os.PathLike[str] | RunStore = DEFAULT_STORE_PATH,
    report_dir: str | os.PathLike[str] | None = None,
    write_report: bool = True,
    **options,
) -> tuple[ComposeResult, Path | None]:
    """:func:`compose_lora` (``options`` as there), writing the adapter to ``out``, then its
    report (``report.html``, ``compose.json``).

    Raises:
        FileExistsError: ``out`` already holds an adapter, or ``report_dir`` a report.
        ValueError, ArtifactError: as :func:`compose_lora`.
    """
    if report_dir is not None and write_report:
        refuse_overwrite(report_dir)
    result = compose_lora(sources, out, store=store, **options)
    if not write_report:
        return result, None
    return result, compose_report(result, _report_dir(store, f"compose-{Path(out).name}",
                                                      report_dir))  # fmt: skip

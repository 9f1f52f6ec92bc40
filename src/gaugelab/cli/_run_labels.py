"""What a stored run trains, read from its spec's fields without importing its experiment.

``gaugelab runs list`` shows it in its "trains" column; reading the stored spec as plain JSON
keeps listing runs free of torch and of every experiment module. Each label is the one the
experiment itself uses (``ZooSpec.labels()``, ``DialSpec.labels()``, ``FinetuneSpec.candidates()``,
``IntrinsicSpec.run_label()``, ``AtlasSpec.run_label()``); tests/cli/test_startup.py checks
that they agree.
"""

from __future__ import annotations

from typing import Any

__all__ = ["DIAL_GD_LABEL", "ZOO_CONVEX_LABEL", "dial_label", "trains"]


def trains(kind: str, spec: dict[str, Any]) -> str | None:
    """What a run trains, as its experiment names it: a twin or LoRA-twin run's optimizer, a
    zoo run's rules (or its convex row), a dial run's settings of p (or gd), a LoRA
    fine-tuning run's candidate (``full``, ``lora r=4``), a kernel run's optimizers, an
    intrinsic-dimension run's role and setting, a learn-forget cell's candidate and block;
    None for other kinds or a spec this version cannot read.

    Read from the stored spec's fields (as ``ZooSpec.labels()`` / ``DialSpec.labels()`` name
    them; tests/cli/test_startup.py checks the two agree), so that listing runs imports no
    experiment and no torch.
    """
    if kind == "twins":
        twin = spec.get("twin")
        return twin.get("optimizer") if isinstance(twin, dict) else None
    if kind == "lora-twins":
        optimizer = spec.get("optimizer")
        return optimizer if isinstance(optimizer, str) else None
    if kind == "lora-finetune":
        full, ranks = spec.get("full"), spec.get("ranks")
        if not isinstance(full, bool) or not isinstance(ranks, list | tuple):
            return None
        if not all(isinstance(r, int) and not isinstance(r, bool) for r in ranks):
            return None
        return ", ".join((["full"] if full else []) + [f"lora r={r}" for r in ranks]) or None
    if kind == "lora-kernel":
        optimizers = spec.get("optimizers")
        ok = isinstance(optimizers, list | tuple) and all(isinstance(o, str) for o in optimizers)
        return (", ".join(optimizers) or None) if ok else None
    if kind == "intrinsic-dim":
        return _intrinsic_label(spec)
    if kind == "atlas":
        return _atlas_label(spec)
    if kind == "learn-forget":
        candidate, block = spec.get("candidate"), spec.get("block")
        ok = isinstance(candidate, str) and isinstance(block, str)
        return f"{candidate} (block {block})" if ok else None
    if kind == "zoo":
        rows, extra = spec.get("rules"), {"convex": ZOO_CONVEX_LABEL}
    elif kind == "dial":
        ps = spec.get("ps")
        if not isinstance(ps, list | tuple) or not all(_is_real(p) for p in ps):
            return None
        rows, extra = [dial_label(p) for p in ps], {"gd_reference": DIAL_GD_LABEL}
    else:
        return None
    if not isinstance(rows, list | tuple) or not all(isinstance(r, str) for r in rows):
        return None  # a spec of another gaugelab version
    flags = [spec.get(field, True) for field in extra]
    if not all(isinstance(flag, bool) for flag in flags):
        return None
    labels = list(rows) + [label for flag, label in zip(flags, extra.values(), strict=True) if flag]
    return ", ".join(labels) or None


def _atlas_label(spec: dict[str, Any]) -> str | None:
    """As ``AtlasSpec.run_label()``: ``torch.optim:Adam orthogonal / sensing``; None for a
    study spec (several checks) or an unreadable one."""
    fields = [spec.get(k) for k in ("optimizers", "groups", "problems")]
    if not all(isinstance(v, list | tuple) and len(v) == 1 for v in fields):
        return None
    (candidate,), (group,), (problem,) = fields
    target = candidate.get("target") if isinstance(candidate, dict) else None
    if not all(isinstance(x, str) for x in (target, group, problem)):
        return None
    return f"{target} {group} / {problem}"


def _intrinsic_label(spec: dict[str, Any]) -> str | None:
    """As the intrinsic-dimension report labels its runs: ``full lr=0.003``, ``did d=32
    seed=1 lr=0.01``; None for the study role or an unreadable spec."""
    role, method = spec.get("role"), spec.get("method")
    fields = {"full": ("full_lrs",), "subspace": ("dims", "seeds", "lrs")}.get(role, ())
    values = [spec.get(k) for k in fields]
    if not values or not all(isinstance(v, list | tuple) and len(v) == 1 for v in values):
        return None
    *setting, lr = (v[0] for v in values)
    if not _is_real(lr):
        return None
    if role == "full":
        return f"full lr={lr:g}"
    d, seed = setting
    return f"{method} d={d} seed={seed} lr={lr:g}" if isinstance(method, str) else None


ZOO_CONVEX_LABEL = "nuclear-norm"
""":data:`gaugelab.experiments.sensing.convex.CONVEX`: the label of the zoo's convex row."""
DIAL_GD_LABEL = "gd"
""":data:`gaugelab.experiments.sensing.dial.GD_LABEL`: the label of the dial's gd reference."""


def dial_label(p: float) -> str:
    """:func:`gaugelab.experiments.sensing.dial.dial_label`: the label of one p, e.g.
    ``adam-p@0.5``."""
    return f"adam-p@{p:g}"


def _is_real(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)

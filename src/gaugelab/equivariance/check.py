"""Certify an optimizer's gauge equivariance with the gauge / identity / noise twin triplet.

The base run starts from factors ``(U₀, V₀)``; from the same (zero) optimizer state start

* the *gauge twin* ``act(U₀, V₀, A)`` for a sampled group element ``A``,
* the *identity twin* (``A = I``): any difference from the base is nondeterminism,
* the *noise twin* ``(U₀, V₀) + noise_scale · randn``: the floor set by round-off amplification.

The represented objects (``W = U Vᵀ``; for the attention problem the logits and QK invariants)
are gauge-invariant, so each twin is compared with the base by their relative Frobenius
distance after every step (:func:`gaugelab.equivariance.distance.relative_distance`; the
objects: ``gaugelab.equivariance.problems``). The verdict names and their twin-protocol
counterparts: ``gaugelab.equivariance.verdicts``; how a zoo name or ``module:Class`` becomes the
optimizer that runs: ``gaugelab.equivariance.targets``.
"""

from __future__ import annotations

import math

import torch

from gaugelab.equivariance.distance import relative_distance
from gaugelab.equivariance.failures import hint, reason, seed_hint
from gaugelab.equivariance.param_groups import group_factory
from gaugelab.equivariance.problems import make_problem
from gaugelab.equivariance.report import EquivarianceReport
from gaugelab.equivariance.targets import closure_style, resolve_target
from gaugelab.equivariance.targets import resolve_optimizer as resolve_optimizer  # re-exported
from gaugelab.equivariance.verdicts import (
    BREAKS,
    EQUIVARIANT,
    INCONCLUSIVE,
    NONDETERMINISTIC,
    PRECISION_LIMITED,
)
from gaugelab.errors import NonFiniteError, OptimizerFailure
from gaugelab.gauge import GROUPS, Group, make_group
from gaugelab.optim import OPTIMIZERS, claim

TWINS = ("gauge", "identity", "noise")
DEFAULT_LR = 3e-2  # docs/protocols.md §2: the identities run at η = 3e-2 unless told otherwise

STILL_ULPS = 4096
"""The base factors "did not move" when their relative change stays below ``STILL_ULPS · eps``.

That is ≈ 9.1e-13 in float64 and ≈ 4.9e-4 in float32. Round-off alone — factors re-expressed
in another basis and back, or an update that is zero up to rounding — changes them by a few to
a few hundred ulps; any step the check is meant to measure changes them far more (at the
default η = 3e-2 the zoo moves the factors by ~1e-1). A base that did not move makes every twin
distance vacuous, so such a run is never ``equivariant``.
"""

INFORMATIVE = 100.0
"""``equivariant`` also needs the base's represented objects to move by ``INFORMATIVE ×`` the
tolerance (1e-7 in float64, 1e-3 in float32): a twin that barely moves stays within tolerance
of a base that barely moves whatever the rule, so the tolerance must be at most 1% of the
motion it is compared against.
"""


_KNOWN_CAUSES = {
    "torch.optim.Muon": (
        "torch.optim.Muon casts the momentum to bfloat16 inside Newton–Schulz, so its update "
        "carries bfloat16 round-off (~4e-3 relative) whatever the parameter dtype; the exact "
        "rule is equivariant (gaugelab.optim.Muon computes in the parameter's dtype), this "
        "implementation is not certifiable in float64."
    ),
}


def _run(factory, problem, initial: list[torch.Tensor], steps: int, label: str, name: str,
         twin: str, cls: type | None = None):  # fmt: skip
    """``steps`` steps from ``initial``; the check itself sets every gradient before each step.

    Returns ``(trajectory, missing)``: the parameters after each step, and the indices of the
    parameters whose gradient was ``None`` after a backward pass. ``label`` names the optimizer
    and the problem, ``name`` the optimizer and ``twin`` the run, in the errors raised; ``cls``
    (the class, ``None`` for a zoo rule) lets a constructor's failure name the group keys it
    needed.

    Raises:
        ValueError: the optimizer refuses the parameters (a ``ValueError`` from its
            constructor).
        OptimizerFailure: the constructor raised anything else, or ``step()`` raised, or
            rebound a parameter to another shape.
        NonFiniteError: a non-finite loss, gradient or parameter.
    """
    params = [p.clone().requires_grad_(True) for p in initial]
    shapes = [tuple(p.shape) for p in params]
    try:
        opt = factory(params)
    except ValueError as exc:
        raise ValueError(
            f"check_equivariance: {label}: the optimizer refuses the problem's {len(params)} "
            f"parameters ({', '.join(map(str, shapes))}): {exc}"
        ) from None
    except Exception as exc:  # a user's constructor: anything it raises is its failure
        raise OptimizerFailure(name, "construct", reason(exc), hint(exc, cls)) from exc
    style = closure_style(opt.step)
    missing: set[int] = set()
    step = 0

    def gradients() -> torch.Tensor:
        for p in params:
            p.grad = None
        with torch.enable_grad():
            loss = problem.loss(params)
            loss.backward()
        if not bool(torch.isfinite(loss)):
            raise NonFiniteError(f"check_equivariance: the loss is {loss.item()} at step {step}")
        for i, p in enumerate(params):
            if p.grad is None:
                missing.add(i)
            elif not bool(torch.isfinite(p.grad).all()):
                raise NonFiniteError(
                    f"check_equivariance: non-finite gradient of parameter {i} (shape "
                    f"{tuple(p.shape)}) at step {step}"
                )
        return loss.detach()

    trajectory = []
    for step in range(1, steps + 1):
        gradients()  # whether or not step() calls the closure, the gradients are set
        try:
            if style == "positional":
                opt.step(gradients)
            elif style == "keyword":
                opt.step(closure=gradients)
            else:
                opt.step()
        except NonFiniteError:
            raise  # the closure's own finding: a diverged run, not a broken optimizer
        except Exception as exc:
            raise OptimizerFailure(name, f"step {step} of {twin}", reason(exc),
                                   hint(exc)) from exc  # fmt: skip
        for i, (p, shape) in enumerate(zip(params, shapes, strict=True)):
            if tuple(p.shape) != shape:
                raise OptimizerFailure(
                    name, f"step {step} of {twin}",
                    f"parameter {i} became {tuple(p.shape)}; it was {shape}",
                    "an optimizer must update its parameters in place",
                )  # fmt: skip
        if not all(bool(torch.isfinite(p).all()) for p in params):
            raise NonFiniteError(f"check_equivariance: step {step} made a parameter non-finite")
        trajectory.append([p.detach().clone() for p in params])
    return trajectory, missing


def _group(group, k: int) -> Group:
    if isinstance(group, Group):
        if group.k != k:
            raise ValueError(
                f"check_equivariance: group acts on k={group.k}; the problem has k={k}"
            )
        return group
    if group == "torus":
        return make_group("torus", k, planes=tuple((i, i + 1) for i in range(0, k - 1, 2)))
    if group not in GROUPS:
        raise ValueError(
            f"check_equivariance: group={group!r}; allowed: {', '.join(sorted(GROUPS))} "
            f"or a gaugelab.gauge.Group"
        )
    return make_group(group, k)


def check_equivariance(
    optimizer,
    *,
    group: str | Group = "orthogonal",
    problem: str = "sensing",
    steps: int = 10,
    dtype: torch.dtype = torch.float64,
    draws: int = 3,
    seed: int = 0,
    noise_scale: float = 1e-7,
    **hyper,
) -> EquivarianceReport:
    """Run the twin triplet for an optimizer and give a verdict.

    Before every ``step()`` the check sets the gradients itself (clear, loss, backward), then
    calls ``step(closure)`` — or ``step()`` when the signature takes no closure — so a rule
    that ignores the closure is measured like any other.

    Args:
        optimizer: a zoo name (``"muon"``), a ``torch.optim.Optimizer`` subclass, or the
            string ``"package.module:Class"`` (imported with the current directory first on
            ``sys.path``, as ``python -m`` does). A class that needs its parameter groups
            declared its own way (Muon's ``use_muon``, LoRA-RITE's factor pairs) gets them from
            :data:`gaugelab.equivariance.param_groups.ADAPTERS`; any other class the plain
            list of the problem's parameters.
        group: a group name (``orthogonal``, ``special-orthogonal``, ``signed-permutation``,
            ``torus``, ``general-linear``, ``trivial``, …) or a :class:`gaugelab.gauge.Group`
            on the problem's k.
        problem: ``"sensing"`` (n = 6, k = 3, planted rank 2, m = 20, factor scale 0.3),
            ``"quadratic"`` (``½‖U Vᵀ − X*‖²_F`` with the same ``X*`` and factors), or
            ``"attention"`` (a one-layer Transformer on addition mod 7 whose heads carry the
            gauge; represented objects: logits and QK invariants; k = d_head = 4).
        steps: optimizer steps per run, ≥ 1.
        dtype: ``torch.float64`` (certification) or ``torch.float32`` (or their names).
        draws: independent group elements, ≥ 1.
        seed: seeds the problem (sensing seed ``seed``, factors ``seed + 7``) and the draws.
        noise_scale: absolute size of the noise twin's perturbation, > 0.
        **hyper: the optimizer's hyperparameters; ``lr`` defaults to 3e-2.

    Returns:
        An :class:`EquivarianceReport`. Verdicts: ``nondeterministic`` (identity twin ≠ 0
        at some step; the explanation names a ``seed`` or ``generator`` the constructor
        takes), ``equivariant`` (gauge twin ≤ tolerance — 1e-9 in float64, 1e-5 in
        float32 — at every step, every parameter had a gradient, the base factors moved by at
        least :data:`STILL_ULPS` ulps and its represented objects by at least
        :data:`INFORMATIVE` × the tolerance; otherwise ``inconclusive``), ``breaks`` (gauge
        twin ≥ 1e-6 and ≥ 100 × the noise twin at step 1 for every draw), ``precision-limited``
        (gauge and noise twins within 10× of each other and far above round-off), else
        ``inconclusive``.

    Raises:
        ValueError: unknown optimizer, group or problem; a ``module:Class`` whose module
            cannot be imported (the message names the target and what the import raised) or
            lacks the class; bad hyperparameters; steps, draws or noise_scale out of range;
            dtype not float32/float64.
        TypeError: the optimizer is not a ``torch.optim.Optimizer`` subclass (the message
            names it).
        NonFiniteError: a run produced a NaN/inf loss, gradient or parameter.
        OptimizerFailure: a user's optimizer raised in its constructor (anything but a
            ``ValueError``) or in ``step()``, or rebound a parameter to another shape: one
            line naming the optimizer, the phase (``construct``, ``step k`` and the twin) and
            the exception.

    Source: singh2026lossbasis, Def. 3.1 (gauge equivariance) and §6 (the twin triplet).
    """
    dtype = {"float32": torch.float32, "float64": torch.float64}.get(dtype, dtype)
    if dtype not in (torch.float32, torch.float64):
        raise ValueError(
            f"check_equivariance: dtype={dtype!r}; allowed: torch.float32, torch.float64 "
            f"(or the strings 'float32', 'float64')"
        )
    if "member_dims" in hyper:
        raise ValueError(
            "check_equivariance: member_dims is set by the check itself (each twin is its own "
            "run); allowed: the rule's other hyperparameters"
        )
    for name, value in (("steps", steps), ("draws", draws)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"check_equivariance: {name}={value!r}; allowed: an integer >= 1")
    if not (
        isinstance(noise_scale, int | float) and math.isfinite(noise_scale) and noise_scale > 0
    ):
        raise ValueError(f"check_equivariance: noise_scale={noise_scale!r}; allowed: > 0")
    hyper.setdefault("lr", DEFAULT_LR)
    name, cls, factory = resolve_target(optimizer, hyper)
    task = make_problem(problem, dtype, seed)
    if cls is not None:  # its parameter groups as the adapter table declares them
        factory = group_factory(cls, hyper, task.pairs)
    G = _group(group, task.k)
    initial = task.initial()
    gen = torch.Generator().manual_seed(seed + 1)

    def compare(run, reference):
        return [task.distance(p, b) for p, b in zip(run, reference, strict=True)]

    missing: set[int] = set()

    def run(start, twin):
        label = f"{name} on the {problem!r} problem"
        trajectory, no_grad = _run(factory, task, start, steps, label, name, twin, cls)
        missing.update(no_grad)
        return trajectory

    base = run(initial, "the base run")
    identity_row = compare(run(task.transform(initial, task.identity()), "the identity twin"),
                           base)  # fmt: skip
    distances: dict[str, list[list[float]]] = {t: [] for t in TWINS}
    factor_distances = []
    for _ in range(draws):
        A = task.sample(G, gen)
        gauge = run(task.transform(initial, A), "a gauge twin")
        noisy = [
            p + noise_scale * torch.randn(p.shape, generator=gen, dtype=dtype) for p in initial
        ]
        distances["gauge"].append(compare(gauge, base))
        distances["identity"].append(list(identity_row))
        distances["noise"].append(compare(run(noisy, "a noise twin"), base))
        factor_distances.append(
            [
                float(relative_distance(torch.cat([x.flatten() for x in task.align(p, A)]),
                                        torch.cat([x.flatten() for x in b])))
                for p, b in zip(gauge, base, strict=True)
            ]
        )  # fmt: skip
    moved = task.distance(base[-1], initial)
    flat = torch.cat([x.flatten() for x in initial])
    factors_moved = max(
        float(relative_distance(torch.cat([x.flatten() for x in b]), flat)) for b in base
    )
    tolerance = 1e-9 if dtype == torch.float64 else 1e-5
    report = EquivarianceReport(
        optimizer=name,
        hyperparameters={k: v for k, v in hyper.items()},
        group=repr(G),
        problem=problem,
        dtype=str(dtype).removeprefix("torch."),
        steps=steps,
        draws=draws,
        seed=seed,
        noise_scale=float(noise_scale),
        distances=distances,
        factor_distances=factor_distances,
        moved=moved,
        tolerance=tolerance,
        factors_moved=factors_moved,
        missing_gradients=sorted(missing),
    )
    report.verdict, report.explanation = _verdict(report, torch.finfo(dtype).eps)
    if report.verdict == NONDETERMINISTIC:
        report.explanation += seed_hint(cls, hyper)
    if name in OPTIMIZERS and isinstance(group, str) and group in OPTIMIZERS[name].claims:
        zoo_hyper = {k: v for k, v in hyper.items() if k != "lr"}
        report.claimed = claim(name, group, **zoo_hyper).property
    cls_name = "" if cls is None else f"{cls.__module__}.{cls.__qualname__}"
    if cls_name in _KNOWN_CAUSES and report.verdict != EQUIVARIANT:
        report.notes.append(_KNOWN_CAUSES[cls_name])
        report.explanation += " — through its arithmetic, not its rule (see the note)"
    if moved < 1e-3 and _unmeasured(report, torch.finfo(dtype).eps) is None:
        report.notes.append(
            f"the base represented object moved only {moved:.2e} (relative): the learning rate "
            f"may be too small for the check to be informative"
        )
    return report


def _verdict(report: EquivarianceReport, eps: float) -> tuple[str, str]:
    gauge, ident, noise = (report.distances[t] for t in TWINS)
    floor = 1e3 * eps
    worst_gauge = max(max(r) for r in gauge)
    if any(d != 0 for row in ident for d in row):
        worst = max(max(r) for r in ident)
        return NONDETERMINISTIC, (
            f"the identity twin (same factors, same state) differs from the base by up to "
            f"{worst:.2e}: the optimizer or the loss is not deterministic, so no gauge claim can "
            f"be made"
        )
    unmeasured = _unmeasured(report, eps)
    if worst_gauge <= report.tolerance:
        if unmeasured is not None:
            return INCONCLUSIVE, unmeasured
        return EQUIVARIANT, (
            f"the gauge twin stays within {worst_gauge:.2e} of the base at every step "
            f"(tolerance {report.tolerance:.0e}) while the base moves {report.moved:.2e}"
        )
    first_g = [r[0] for r in gauge]
    first_n = [r[0] for r in noise]
    if all(g >= 1e-6 and g >= 100 * n for g, n in zip(first_g, first_n, strict=True)):
        ratio = min(g / max(n, 1e-300) for g, n in zip(first_g, first_n, strict=True))
        return BREAKS, (
            f"after one step every draw's gauge twin is at least {min(first_g):.2e} from the "
            f"base and at least {ratio:.0f}× its noise twin: the update, as computed, depends "
            f"on the basis"
        )
    pairs = [
        (g, n) for rg, rn in zip(gauge, noise, strict=True) for g, n in zip(rg, rn, strict=True)
    ]
    if all(g > floor and n > floor and 0.1 <= g / n <= 10 for g, n in pairs):
        return PRECISION_LIMITED, (
            f"gauge and noise twins stay within 10× of each other, far above {report.dtype} "
            f"round-off ({floor:.0e}): the update amplifies or injects rounding, so the check "
            f"cannot separate basis dependence from round-off"
        )
    if unmeasured is not None:
        return INCONCLUSIVE, unmeasured
    return INCONCLUSIVE, (
        f"the gauge twin reaches {worst_gauge:.2e} (above tolerance {report.tolerance:.0e}) but "
        f"neither breaks at step 1 (≥ 1e-6 and ≥ 100× the noise twin) nor tracks the noise twin"
    )


def _unmeasured(report: EquivarianceReport, eps: float) -> str | None:
    """Why the twin distances measure nothing (so no ``equivariant``), or ``None``."""
    if report.missing_gradients:
        which = ", ".join(map(str, report.missing_gradients))
        return (
            f"not every parameter was measured: parameter(s) {which} have no gradient after the "
            f"check's backward pass (the loss does not reach them)"
        )
    floor = STILL_ULPS * eps
    if report.factors_moved is not None and report.factors_moved < floor:
        return (
            f"the optimizer did not move the parameters: the base factors change by at most "
            f"{report.factors_moved:.2e} (relative) in {report.steps} steps, below the floor "
            f"{floor:.1e} ({STILL_ULPS} ulps of {report.dtype}), although the check set every "
            f"gradient before each step(); twins that do not move agree whatever the rule"
        )
    needed = INFORMATIVE * report.tolerance
    if report.moved < needed:
        return (
            f"the base's represented objects move only {report.moved:.2e} (relative), less than "
            f"{INFORMATIVE:.0f} × the tolerance ({needed:.0e}): twins that barely move stay "
            f"within tolerance whatever the rule; raise the learning rate or the steps"
        )
    return None

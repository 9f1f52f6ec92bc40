"""The convex reference row of the zoo: minimum nuclear norm subject to the measurements.

Solved per seed by cvxpy with SCS (``gaugelab[convex]``); recorded as a :class:`RuleResult`.
Without cvxpy (or its SCS solver) the row is *skipped*, never failed: :func:`convex_missing`
says why, and the zoo plans no convex run.
"""

from __future__ import annotations

import time
import warnings
from typing import Any

import numpy as np
import torch

from gaugelab.experiments.sensing.problem import SensingBatch, SensingExperiment
from gaugelab.experiments.sensing.records import INTERPOLATED, RuleResult
from gaugelab.tasks import effective_rank

CONVEX = "nuclear-norm"
"""Label of the convex reference row."""
CONVEX_SKIPPED = "skipped: install gaugelab[convex]"
"""What the zoo reports for the convex row when cvxpy with SCS is not installed."""


def convex_missing() -> str | None:
    """Why the convex row cannot be solved here (``None`` when cvxpy with SCS imports).

    Returns:
        ``None``, or a one-line reason that starts with :data:`CONVEX_SKIPPED`.
    """
    try:
        import cvxpy as cp
    except ImportError:
        return f"{CONVEX_SKIPPED} (cvxpy is not installed)"
    if "SCS" not in cp.installed_solvers():
        return f"{CONVEX_SKIPPED} (cvxpy has no SCS solver)"
    return None


def nuclear_norm_reference(spec: SensingExperiment, batch: SensingBatch) -> RuleResult:
    """The convex reference: ``min ‖X‖_* s.t. A vec(X) = y`` per seed, by cvxpy with SCS.

    Always solved in float64, on the float64 instance (the same float32 draws, ``y`` formed in
    float64; a float32 ``y`` is not exactly consistent and SCS stalls on it), with SCS
    tolerances ``eps_abs = eps_rel = 1e-9`` (**ours**; 1e-6 leaves errors of ~1e-4) and at most
    100,000 iterations, so a recovery error below ~1e-6 means exact recovery. The recovery error
    is measured against ``batch.target``. At the reference m = 462 the convex program does not
    recover every instance (seed 456: 0.100 with SCS and with Clarabel — its minimiser has a
    smaller nuclear norm than ``X*``). Recorded as a :class:`RuleResult` with one "rate" (0)
    and status ``interpolated`` when SCS reports ``optimal``, else ``budget``.

    Raises:
        ImportError: cvxpy is not installed (``pip install 'gaugelab[convex]'``).

    Source: recht2010guaranteed (nuclear-norm minimisation); the solver: SCS
    (odonoghue2016conic) through cvxpy (diamond2016cvxpy).
    """
    try:
        import cvxpy as cp
    except ImportError:
        raise ImportError(
            "the convex reference row needs cvxpy with SCS: pip install 'gaugelab[convex]' "
            "(or pass convex=False / --no-convex)"
        ) from None

    start = time.perf_counter()
    exact = SensingBatch.build(spec.model_copy(update={"dtype": "float64"}))
    n = exact.target.shape[-1]
    rows: dict[str, list[list[Any]]] = {k: [] for k in ("rec", "loss", "erank", "status", "sv")}
    for s in range(len(exact.seeds)):
        A, y = exact.A[s].numpy(), exact.y[s].numpy()
        X = cp.Variable((n, n))
        problem = cp.Problem(cp.Minimize(cp.normNuc(X)), [A @ cp.vec(X, order="C") == y])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "may be inaccurate": see the status
            problem.solve(solver=cp.SCS, eps_abs=1e-9, eps_rel=1e-9, max_iters=100_000)
        W = torch.as_tensor(np.asarray(X.value, dtype=np.float64))
        rows["rec"].append(
            [
                float(
                    torch.linalg.matrix_norm(W - batch.target[s].double())
                    / torch.linalg.matrix_norm(batch.target[s].double())
                )
            ]
        )
        residual = exact.A[s] @ W.reshape(-1) - exact.y[s]  # [m]
        rows["loss"].append([float((residual * residual).mean())])
        rows["erank"].append([float(effective_rank(W, convention="roy_vetterli"))])
        rows["status"].append([INTERPOLATED if problem.status == "optimal" else "budget"])
        rows["sv"].append([torch.linalg.svdvals(W).tolist()])
    return RuleResult(
        rule=CONVEX,
        hyper={"solver": "SCS", "eps": 1e-9},
        decayed=False,
        lrs=[0.0],
        seeds=list(exact.seeds),
        recovery=rows["rec"],
        loss=rows["loss"],
        effective_rank=rows["erank"],
        balancedness=[[float("nan")] for _ in exact.seeds],
        steps=[[0] for _ in exact.seeds],
        status=rows["status"],
        spectra=rows["sv"],
        curve_steps=[],
        curve_loss=[],
        curve_recovery=[],
        seconds=time.perf_counter() - start,
    )

"""Common-scalar preconditioned flows and the effective optimizer clock.

A flow ``θ̇ = −∇L(θ)/a(t)`` with one positive scalar ``a(t)`` is gradient flow run on the clock
``τ(t) = ∫₀ᵗ du/a(u)``. Integration is delegated to ``scipy.integrate`` (DOP853, tight
tolerances): this module only states the flows.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from gaugelab.lazy import LazyModule

_integrate = LazyModule("scipy.integrate")


def effective_clock(a: Callable[[float], float], t: float) -> float:
    """``τ(t) = ∫₀ᵗ du / a(u)`` for a positive scalar schedule ``a``.

    Args:
        a: ``a(u) > 0``, locally integrable reciprocal.
        t: physical time ≥ 0.

    Returns:
        τ(t) (float, same time units as ``t`` divided by ``a``'s).

    Raises:
        ValueError: ``t < 0``.

    Source: singh2026lossbasis, Thm. 4.6 (the clock).
    """
    if t < 0:
        raise ValueError(f"effective_clock: t={t}; allowed: t >= 0")

    value, _ = _integrate.quad(lambda u: 1.0 / a(u), 0.0, t, epsabs=1e-14, epsrel=1e-13, limit=200)
    return value


def preconditioned_flow(
    grad: Callable[[np.ndarray], np.ndarray],
    theta0: np.ndarray,
    t_end: float,
    *,
    a: Callable[[float], float] | None = None,
    preconditioner: Callable[[np.ndarray], np.ndarray] | None = None,
    rtol: float = 1e-12,
    atol: float = 1e-14,
) -> np.ndarray:
    """Integrate ``θ̇ = −P(θ) ∇L(θ) / a(t)`` from ``θ₀`` to ``t_end``.

    Args:
        grad: ``θ ↦ ∇L(θ)``, arrays of ``theta0``'s shape (float64).
        theta0: initial point, any shape (flattened internally).
        t_end: final time ≥ 0.
        a: common scalar schedule ``a(t) > 0`` (default 1: gradient flow).
        preconditioner: optional entrywise or anisotropic map ``g ↦ P g`` applied to the
            gradient (use it to contrast with the common-scalar case).
        rtol, atol: integrator tolerances.

    Returns:
        ``θ(t_end)`` with ``theta0``'s shape.

    Raises:
        ValueError: ``t_end < 0``; RuntimeError: the integrator failed.

    Source: singh2026lossbasis, Def. 4.6 (common-scalar flow).
    """
    if t_end < 0:
        raise ValueError(f"preconditioned_flow: t_end={t_end}; allowed: >= 0")
    shape = np.shape(theta0)

    def rhs(t, y):
        g = np.asarray(grad(y.reshape(shape)), dtype=np.float64)
        if preconditioner is not None:
            g = np.asarray(preconditioner(g), dtype=np.float64)
        scale = 1.0 if a is None else 1.0 / a(t)
        return -scale * g.reshape(-1)

    y0 = np.asarray(theta0, dtype=np.float64).reshape(-1)

    sol = _integrate.solve_ivp(rhs, (0.0, t_end), y0, method="DOP853", rtol=rtol, atol=atol)
    if not sol.success:
        raise RuntimeError(f"preconditioned_flow: integration failed: {sol.message}")
    return sol.y[:, -1].reshape(shape)

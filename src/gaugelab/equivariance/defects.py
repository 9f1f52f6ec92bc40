"""Closed-form first-step defect of Adam along an orthogonal gauge orbit."""

from __future__ import annotations

import torch


def adam_direction(G: torch.Tensor, eps: float) -> torch.Tensor:
    """Zero-state, bias-corrected Adam's first direction ``D_ε(G) = G ⊘ (|G| + ε)``.

    Args:
        G: ``[..., n, k]`` gradient, any float dtype.
        eps: ε ≥ 0.

    Returns:
        Tensor like ``G``.

    Source: singh2026lossbasis, Prop. 4.4 (the first-step map).
    """
    return G / (G.abs() + eps)


def adam_defect_map(G: torch.Tensor, Q: torch.Tensor, eps: float) -> torch.Tensor:
    """Gauge-aligned defect ``E_Q(G) = D_ε(G Q) Qᵀ − D_ε(G)``.

    Args:
        G: ``[..., n, k]`` gradient.
        Q: ``[k, k]`` orthogonal matrix.
        eps: ε ≥ 0.

    Returns:
        ``[..., n, k]``; zero for every ``G`` iff the first Adam step commutes with ``Q``.

    Source: singh2026lossbasis, Prop. 4.4.
    """
    return adam_direction(G @ Q, eps) @ Q.mT - adam_direction(G, eps)


def adam_first_step_defect(
    U0: torch.Tensor,
    V0: torch.Tensor,
    grad_U: torch.Tensor,
    grad_V: torch.Tensor,
    Q: torch.Tensor,
    lr: float,
    eps: float,
) -> torch.Tensor:
    """``W̃₁ − W₁``: represented-matrix defect after one zero-state Adam step.

    ``W₁`` is the product after one Adam step from ``(U₀, V₀)``, ``W̃₁`` after one step from
    ``(U₀ Q, V₀ Q)``. With ``E_U = E_Q(G_U)``, ``E_V = E_Q(G_V)``, ``D_U = D_ε(G_U)``:

    ``W̃₁ − W₁ = −η (E_U V₀ᵀ + U₀ E_Vᵀ) + η² (E_U D_Vᵀ + D_U E_Vᵀ + E_U E_Vᵀ)``.

    Args:
        U0: ``[d1, k]``, V0: ``[d2, k]`` factors.
        grad_U: ``[d1, k]``, grad_V: ``[d2, k]`` gradients of the loss at ``(U₀, V₀)``.
        Q: ``[k, k]`` orthogonal.
        lr: η.
        eps: Adam's ε (added after the square root, the torch convention).

    Returns:
        ``[d1, d2]`` tensor in the inputs' dtype.

    Raises:
        ValueError: shapes that do not match ``[d1, k]``, ``[d2, k]``, ``[k, k]``.

    Source: singh2026lossbasis, Prop. 4.4 (proof in App. B.5).
    """
    k = U0.shape[-1]
    if (
        U0.shape != grad_U.shape
        or V0.shape != grad_V.shape
        or V0.shape[-1] != k
        or Q.shape != (k, k)
    ):
        raise ValueError(
            f"adam_first_step_defect: shapes U0 {tuple(U0.shape)}, V0 {tuple(V0.shape)}, "
            f"grad_U {tuple(grad_U.shape)}, grad_V {tuple(grad_V.shape)}, Q {tuple(Q.shape)}; "
            f"allowed: [d1, k], [d2, k], [d1, k], [d2, k], [k, k]"
        )
    E_U, E_V = adam_defect_map(grad_U, Q, eps), adam_defect_map(grad_V, Q, eps)
    D_U, D_V = adam_direction(grad_U, eps), adam_direction(grad_V, eps)
    first = E_U @ V0.mT + U0 @ E_V.mT
    second = E_U @ D_V.mT + D_U @ E_V.mT + E_U @ E_V.mT
    return -lr * first + lr**2 * second

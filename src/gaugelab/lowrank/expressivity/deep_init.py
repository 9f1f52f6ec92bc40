"""Compressed Deep LoRA initialization (seed 003 §0x0AU): full-width scaled-orthogonal factors,
one first-batch gradient, the active bases it determines, ``ε_ℓ I_r`` inner factors, and the
two optimizer groups of the compact adapter ``ΔW = L_out (C_L⋯C_1) R_inᵀ``."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from gaugelab.errors import NonFiniteError
from gaugelab.linalg import haar_orthogonal, orthonormal_basis
from gaugelab.lowrank.expressivity.deep import (
    DeepLoraParameters,
    compression_error_bound,
    deep_lora_parameters,
)

__all__ = ["CompressedDeepLora", "initialize_compressed_deep_lora"]

_WHERE = "initialize_compressed_deep_lora"


@dataclass(frozen=True)
class CompressedDeepLora:
    """The compact Deep LoRA adapter of one ``[d_out, d_in]`` matrix, as compression leaves it.

    Attributes:
        outer_left: ``L_out``, ``[d_out, r]`` trainable ``nn.Parameter``.
        outer_right: ``R_in``, ``[d_in, r]`` trainable ``nn.Parameter``, orthonormal columns.
        inner: ``(C_1, …, C_L)`` in application order, each ``[r, r]`` ``nn.Parameter`` equal
            to ``ε_ℓ I_r`` at initialization.
        lr: the inner group's learning rate (the main optimizer's).
        outer_lr: the outer group's learning rate, ``outer_lr_scale · lr``.
        epsilon: ``(ε_1, …, ε_L)``, the init scale of the wide and of the inner factors.
        width: the wide factors' width ``d = max(d_out, d_in)``.
        loss: the first-batch loss at the wide initialization (a float).
        wide_update: ``[d_out, d_in]`` CPU tensor, ``W_L⋯W_1`` of the wide factors.
        gradient: ``[d_out, d_in]`` CPU tensor, the first-batch gradient of the loss with
            respect to the update, at ``wide_update`` (the gradient snapshot of §0x0AV).
        residual: ``‖W_L⋯W_1 − L_out (C_L⋯C_1) R_inᵀ‖_F²`` at initialization: what the
            compression drops (§0x0AR: small, not zero).
        residual_bound: ``m Π_ℓ ε_ℓ²``, ``m = min(d_out, d_in) − r`` (§0x0AR's bound; at
            initialization ``residual`` equals it).
        parameters: the §0x0AT ledger (``P_Deep = r(d_out + d_in) + L r²``).
        wide_parameters: entries of the wide factors, ``d·d_in + (L − 2)·d² + d_out·d``; their
            gradients hold as many: the ``M_wide factors`` and ``M_wide gradients`` terms of
            the transient peak ``M_peak,init`` (§0x0AU), freed when this function returns.
    """

    outer_left: nn.Parameter
    outer_right: nn.Parameter
    inner: tuple[nn.Parameter, ...]
    lr: float
    outer_lr: float
    epsilon: tuple[float, ...]
    width: int
    loss: float
    wide_update: torch.Tensor
    gradient: torch.Tensor
    residual: float
    residual_bound: float
    parameters: DeepLoraParameters
    wide_parameters: int

    def update(self) -> torch.Tensor:
        """``ΔW = L_out (C_L⋯C_1) R_inᵀ``, ``[d_out, d_in]``, differentiable in every factor."""
        core = self.inner[0]
        for C in self.inner[1:]:
            core = C @ core  # C_ℓ ⋯ C_1
        return self.outer_left @ core @ self.outer_right.T

    def param_groups(self) -> list[dict]:
        """The two optimizer groups, fresh dicts for ``torch.optim``: ``"inner"`` (the ``C_ℓ``
        at ``lr``) and ``"outer"`` (``L_out``, ``R_in`` at ``outer_lr``); they partition the
        trainable parameters. Optimizer-group identity is part of the method (§0x0AU)."""
        return [
            {"name": "inner", "params": list(self.inner), "lr": self.lr},
            {"name": "outer", "params": [self.outer_left, self.outer_right], "lr": self.outer_lr},
        ]


def _positive(name: str, v: object) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v <= 0:
        raise ValueError(f"{_WHERE}: {name}={v!r}; allowed: a finite number > 0")
    return float(v)


def _dim(name: str, v: object) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"{_WHERE}: {name}={v!r}; allowed: an integer >= 1")
    return v


def _scales(epsilon: object, depth: int) -> tuple[float, ...]:
    if isinstance(epsilon, int | float) and not isinstance(epsilon, bool):
        return (_positive("epsilon", epsilon),) * depth
    if not isinstance(epsilon, Sequence) or len(epsilon) != depth:
        raise ValueError(
            f"{_WHERE}: epsilon={epsilon!r}; allowed: a finite number > 0 or a sequence of "
            f"depth={depth} of them"
        )
    return tuple(_positive(f"epsilon[{i}]", e) for i, e in enumerate(epsilon))


def _wide_factors(
    d_out: int, d_in: int, width: int, eps: Sequence[float], gen, dtype
) -> list[torch.Tensor]:
    """``[W_1, …, W_L]``: ``W_1 [width, d_in]``, ``W_ℓ [width, width]``, ``W_L [d_out, width]``,
    each ``ε_ℓ`` times a slice of a Haar orthogonal ``[width, width]`` (orthonormal columns of
    ``W_1``, rows of ``W_L``), drawn in the order ``ℓ = 1 … L``."""
    L, out = len(eps), []
    for i, e in enumerate(eps):
        rows = d_out if i == L - 1 else width
        cols = d_in if i == 0 else width
        out.append(e * haar_orthogonal(width, generator=gen, dtype=dtype)[:rows, :cols])
    return out


def _active_basis(W: torch.Tensor, grad: torch.Tensor, eps: float, h: int) -> torch.Tensor:
    """Orthonormal ``[n, 2h]`` basis of ``span(V_h) + span(W̄ᵀ U_h)``: the top ``h`` right
    singular vectors of the first factor's gradient ``[width, n]`` and the images of its top
    ``h`` left singular vectors through the initialized factor ``W̄ = W / ε`` (§0x0AQ: the
    first gradient's directions and their images make the active block ``2r`` wide)."""
    U, S, Vh = torch.linalg.svd(grad, full_matrices=False)  # [width, k], [k], [k, n]
    tol = max(grad.shape) * torch.finfo(grad.dtype).eps * float(S[0])
    k = int((S > tol).sum()) if float(S[0]) > 0 else 0
    if k < h:
        raise ValueError(
            f"{_WHERE}: first_batch_loss has a gradient of numerical rank {k} at the wide "
            f"initialization; allowed: a gradient of rank >= rank/2 = {h} (its top rank/2 "
            "directions fix the outer bases), or a smaller rank"
        )
    M = torch.cat([Vh[:h].T, W.T @ U[:, :h] / eps], dim=1)  # [n, 2h]
    B = orthonormal_basis(M)
    if B.shape[1] < 2 * h:
        raise ValueError(
            f"{_WHERE}: the gradient's top {h} directions and their images span only "
            f"{B.shape[1]} < rank={2 * h} dimensions; allowed: a first batch whose directions "
            "and images are independent, or a smaller rank"
        )
    return B


def initialize_compressed_deep_lora(
    first_batch_loss: Callable[[torch.Tensor], torch.Tensor],
    d_out: int,
    d_in: int,
    rank: int,
    depth: int = 3,
    *,
    epsilon: float | Sequence[float],
    lr: float,
    outer_lr_scale: float,
    generator: torch.Generator | None = None,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> CompressedDeepLora:
    """Compress a full-width deep factorization into a rank-``r`` Deep LoRA adapter, following
    the source's pipeline step by step.

    1. **Wide factors.** ``W_1 [d, d_in]``, ``W_2 … W_{L−1} [d, d]``, ``W_L [d_out, d]``,
       ``d = max(d_out, d_in)``, scaled orthogonal: ``W_ℓ = ε_ℓ Q_ℓ`` with ``Q_ℓ`` a slice of a
       Haar orthogonal matrix (orthonormal columns of ``W_1``, rows of ``W_L``; §0x0AP).
    2. **Update and one batch gradient.** ``ΔW_wide = W_L⋯W_1`` and the gradient of
       ``first_batch_loss(ΔW_wide)`` with respect to every wide factor (autograd).
    3. **CPU compression.** Parameters, update and gradients move to the CPU. On the smaller
       side (the input side when ``d_in ≤ d_out``): the top ``r/2`` right singular vectors of
       the first factor's gradient and the images ``W̄_1ᵀ u`` of its top ``r/2`` left singular
       vectors (``W̄_1 = W_1/ε_1``) span the active ``r``-dimensional subspace (§0x0AQ: width
       ``2r*``); ``R_in`` is an orthonormal basis of it, and
       ``L_out = ΔW_wide R_in / Π_ℓ ε_ℓ`` its image under the normalized initial product
       (mirrored, through ``W_L``'s gradient, when ``d_out < d_in``).
    4. **Compact factors.** ``L_out [d_out, r]``, ``R_in [d_in, r]``, and inner factors
       ``C_ℓ = ε_ℓ I_r``, ``ℓ = 1 … L``; so ``L_out (C_L⋯C_1) R_inᵀ = ΔW_wide R_in R_inᵀ``
       and the dropped part has squared norm ``(min(d_out, d_in) − r) Π_ℓ ε_ℓ²`` (§0x0AR).
    5. **Two optimizer groups.** ``"inner"`` (the ``C_ℓ``) at ``lr``, the main optimizer's;
       ``"outer"`` (``L_out``, ``R_in``) at the scaled ``outer_lr_scale · lr``.

    Args:
        first_batch_loss: the task loss on the first batch as a function of the adapter
            update: takes ``ΔW`` ``[d_out, d_in]`` (``dtype``, on ``device``, requiring grad)
            and returns a one-element tensor; called once.
        d_out, d_in: the adapted matrix's shape (``W0 + ΔW`` is ``[d_out, d_in]``), ints ``≥ 1``.
        rank: the outer width ``r``: an even int, ``2 ≤ r < min(d_out, d_in)`` (``r/2``
            gradient directions and their ``r/2`` images; ``m = min(d_out, d_in) − r > 0``).
        depth: ``L``, an int ``≥ 2`` (the source's usual depth is 3).
        epsilon: ``ε > 0``, one for every layer, or ``L`` of them (``ε_1 … ε_L``); the source
            run used ``10⁻³``, a source choice, not a default (§0x0AV).
        lr: the main (inner) learning rate, ``> 0``.
        outer_lr_scale: the outer factors' learning-rate factor, ``> 0``.
        generator: CPU ``torch.Generator`` for the wide factors (``L`` Haar draws of size
            ``d``, in layer order); ``None``: a fresh one seeded 0. Global RNG is untouched.
        dtype: real floating dtype of every factor (default ``torch.float64``).
        device: where ``first_batch_loss`` runs and the compact factors live (default CPU).

    Returns:
        :class:`CompressedDeepLora`: the compact factors (``nn.Parameter``, ``dtype``, on
        ``device``), the two groups (``param_groups()``), the ledger (``parameters``,
        ``wide_parameters``), and the compression record (first-batch ``loss``, CPU
        ``wide_update`` and ``gradient``, ``residual`` and ``residual_bound``).

    Raises:
        ValueError: ``d_out``, ``d_in`` not ints ``≥ 1``; ``rank`` odd or outside
            ``[2, min(d_out, d_in))``; ``depth < 2``; ``epsilon``, ``lr`` or
            ``outer_lr_scale`` not finite and ``> 0`` (or ``epsilon`` not of length ``L``);
            ``dtype`` not floating; ``first_batch_loss`` not callable, not returning one
            element, or its gradient of numerical rank ``< r/2`` (the bases would be arbitrary).
        TypeError: ``generator`` is neither ``None`` nor a ``torch.Generator``.
        NonFiniteError: the first-batch loss or gradient is NaN or infinite.

    Scope: the source's initialization pipeline for one adapted matrix; the exact
    invariant-subspace statement holds for Yaras et al.'s deep matrix recovery (§0x0AQ). Does
    not prove: that the compact trajectory tracks the wide one for another loss or optimizer,
    nor a generalization gain (§0x0AW); the deeper graph is parameter-efficient, not
    state-equivalent (§0x0AT).

    Source: seed 003 §0x0AU (pipeline), §0x0AQ–0x0AR (the ``2r`` active block and the
    dropped complement), §0x0AT (ledger), §0x0AV (the compression record);
    yaras2024compressible.
    """
    d_out, d_in = _dim("d_out", d_out), _dim("d_in", d_in)
    small = min(d_out, d_in)
    if isinstance(rank, bool) or not isinstance(rank, int) or rank % 2 or not 2 <= rank < small:
        raise ValueError(
            f"{_WHERE}: rank={rank!r}; allowed: an even integer 2 <= rank < min(d_out, d_in) = "
            f"{small} (rank/2 gradient directions and their images: the active block is 2r "
            "wide, §0x0AQ)"
        )
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 2:
        raise ValueError(f"{_WHERE}: depth={depth!r}; allowed: an integer >= 2")
    eps = _scales(epsilon, depth)
    lr = _positive("lr", lr)
    outer_lr = lr * _positive("outer_lr_scale", outer_lr_scale)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"{_WHERE}: dtype={dtype!r}; allowed: a real floating torch dtype")
    if not callable(first_batch_loss):
        raise ValueError(f"{_WHERE}: first_batch_loss={first_batch_loss!r}; allowed: a callable")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(
            f"{_WHERE}: generator must be a torch.Generator or None, got {type(generator).__name__}"
        )
    gen = torch.Generator().manual_seed(0) if generator is None else generator
    width = max(d_out, d_in)

    # 1. full-width scaled-orthogonal factors, [d, d_in], [d, d] × (L − 2), [d_out, d]
    drawn = _wide_factors(d_out, d_in, width, eps, gen, dtype)
    wide = [W.to(device).requires_grad_() for W in drawn]
    # 2. the end-to-end update and one batch gradient with respect to every wide factor
    update = wide[0]
    for W in wide[1:]:
        update = W @ update  # W_ℓ ⋯ W_1
    loss = first_batch_loss(update)
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        raise ValueError(
            f"{_WHERE}: first_batch_loss returned {type(loss).__name__}; allowed: a "
            "one-element tensor"
        )
    if not torch.isfinite(loss.detach()).all():
        raise NonFiniteError(f"{_WHERE}: the first-batch loss is {float(loss.detach())}")
    if not loss.requires_grad:
        raise ValueError(
            f"{_WHERE}: first_batch_loss returned a loss that does not depend on its argument; "
            "allowed: a loss differentiable in ΔW"
        )
    grads = torch.autograd.grad(loss.reshape(()), [*wide, update])
    if not all(bool(torch.isfinite(g).all()) for g in grads):
        raise NonFiniteError(f"{_WHERE}: the first-batch gradient is not finite")

    # 3. compression on the CPU, on the smaller side
    Ws = [W.detach().cpu() for W in wide]
    gs = [g.detach().cpu() for g in grads[:-1]]
    wide_update, gradient = update.detach().cpu(), grads[-1].detach().cpu()
    first_loss = float(loss.detach())
    scale = math.prod(eps)
    if d_in <= d_out:
        right = _active_basis(Ws[0], gs[0], eps[0], rank // 2)  # [d_in, r]
        left = wide_update @ right / scale  # [d_out, r]
    else:
        left = _active_basis(Ws[-1].T, gs[-1].T, eps[-1], rank // 2)  # [d_out, r]
        right = wide_update.T @ left / scale  # [d_in, r]
    del drawn, wide, grads, update, loss

    # 4. outer bases and ε_ℓ I_r inner factors
    eye = torch.eye(rank, dtype=dtype)
    residual = float(torch.sum((wide_update - scale * left @ right.T) ** 2))
    return CompressedDeepLora(
        outer_left=nn.Parameter(left.to(device)),
        outer_right=nn.Parameter(right.to(device)),
        inner=tuple(nn.Parameter((e * eye).to(device)) for e in eps),
        # 5. separate groups: the main learning rate inside, the scaled one outside
        lr=lr,
        outer_lr=outer_lr,
        epsilon=eps,
        width=width,
        loss=first_loss,
        wide_update=wide_update,
        gradient=gradient,
        residual=residual,
        residual_bound=float(compression_error_bound(small - rank, list(eps))),
        parameters=deep_lora_parameters(d_out, d_in, rank, depth),
        wide_parameters=width * d_in + (depth - 2) * width * width + d_out * width,
    )

"""ScaledGD: factor gradients preconditioned by the partner factor's Gram matrix.

For a factored model ``W = U Vᵀ`` (``U [d1, k]``, ``V [d2, k]``) one step is, from the same
pre-step factors,

    U ← U − η G_U (VᵀV + λ_V I)⁻¹,        V ← V − η G_V (UᵀU + λ_U I)⁻¹,

and in the LoRA layout ``ΔW = s·B A`` (``B [d_out, r]``, ``A [r, d_in]``; ``factors="ba"``)

    B ← B − η G_B (A Aᵀ + λ_A I)⁻¹,       A ← A − η (BᵀB + λ_B I)⁻¹ G_A,

which on LoRA factors is the Riemannian-preconditioned LoRA update (zhang2024riemannian).

Undamped (``damping=0``) the rule is equivariant under the whole GL(k) gauge
``(U M, V M⁻ᵀ)``: ``G_U ↦ G_U M⁻ᵀ`` and ``VᵀV ↦ M⁻¹ VᵀV M⁻ᵀ``, so the step maps to
``G_U (VᵀV)⁻¹ M`` — the first rule of the zoo that is. A damping ``λ I`` is not moved by a
non-orthogonal ``M``, so the damped rule is equivariant under O(k) only: the default damping
``λ = 1e-4·mean(diag(Gram)) + 1e-12`` is ``1e-4·‖V‖²_F/k + 1e-12``, invariant under
orthogonal changes of basis (the trace is) but not under GL(k).

Source: tong2021accelerating (ScaledGD); zhang2024riemannian (the LoRA form);
singh2026lossbasis, Remark 4.7 and App. D.10 (the ScaledGD control; seed 000, Example 3.7).
"""

from __future__ import annotations

import torch

from gaugelab.errors import NonFiniteError
from gaugelab.optim._base import check_choice, check_range
from gaugelab.optim._zoo import ZooOptimizer

FACTOR_LAYOUTS = ("uv", "ba")
"""``"uv"``: pairs ``(U [*, d1, k], V [*, d2, k])``, ``W = U Vᵀ`` (the gauge acts on the last
dim of both); ``"ba"``: pairs ``(B [*, d_out, r], A [*, r, d_in])``, ``ΔW = B A`` (PEFT)."""

AUTO_DAMPING_FACTOR = 1e-4
"""The reference damping ``λ = 1e-4 · mean(diag(Gram)) + 1e-12`` (``damping="auto"``)."""
AUTO_DAMPING_FLOOR = 1e-12


def gram_damping(gram: torch.Tensor, damping: float | str) -> torch.Tensor:
    """The damping ``λ`` added to a Gram matrix, per matrix of the batch.

    Args:
        gram: ``[..., k, k]`` symmetric positive semi-definite Gram matrices.
        damping: ``"auto"`` (``1e-4 · mean(diag(gram)) + 1e-12``) or a fixed ``λ ≥ 0``.

    Returns:
        ``[..., 1, 1]`` tensor in ``gram``'s dtype (broadcasts against ``gram``).
    """
    if damping == "auto":
        mean_diag = gram.diagonal(dim1=-2, dim2=-1).mean(dim=-1)
        lam = AUTO_DAMPING_FACTOR * mean_diag + AUTO_DAMPING_FLOOR
    else:
        lam = torch.full(gram.shape[:-2], float(damping), dtype=gram.dtype, device=gram.device)
    return lam[..., None, None]


def _damped(gram: torch.Tensor, damping: float | str) -> torch.Tensor:
    eye = torch.eye(gram.shape[-1], dtype=gram.dtype, device=gram.device)
    return gram + gram_damping(gram, damping) * eye


class ScaledGD(ZooOptimizer):
    """ScaledGD on factor pairs: each factor's gradient times the inverse (damped) Gram
    matrix of its partner, both computed from the pre-step factors.

    The parameters of every param group are read as consecutive pairs: ``[U₁, V₁, U₂, V₂,
    …]`` (``factors="uv"``) or ``[B₁, A₁, B₂, A₂, …]`` (``factors="ba"``). A factor whose
    gradient is ``None`` does not move; its value still preconditions its partner.

    Args:
        params: parameters or param groups; each group holds pairs of matrices with the
            shapes of ``factors`` (and equal leading member dims). A group may set ``lr``,
            ``damping``, ``factors`` and ``member_dims``.
        lr: learning rate η ≥ 0.
        damping: ``"auto"`` (the reference: ``λ = 1e-4·mean(diag(Gram)) + 1e-12`` per matrix,
            recomputed every step) or a fixed ``λ ≥ 0``; ``0`` is undamped ScaledGD (a
            singular Gram then raises :class:`NonFiniteError`).
        factors: ``"uv"`` or ``"ba"`` (:data:`FACTOR_LAYOUTS`).
        member_dims: leading ensemble dims; every Gram matrix, inverse and damping is per
            member (the products are batched over them).

    Raises:
        ValueError: hyperparameter out of range; a group with an odd number of parameters; a
            pair whose shapes do not fit ``factors`` (rank dims differ, leading dims differ).
        NonFiniteError: (from ``step``) a NaN/inf loss or gradient, or a step that would be
            non-finite (a singular undamped Gram) — raised before any parameter moves.

    Source: tong2021accelerating; zhang2024riemannian; singh2026lossbasis, Remark 4.7 and
    App. D.10 (seed 000, Example 3.7).
    """

    rule_name = "scaled-gd"
    requires_matrices = True
    state_kinds: dict[str, str] = {}  # stateless: nothing to move under a gauge element

    def __init__(
        self,
        params,
        lr: float = 1e-2,
        damping: float | str = "auto",
        factors: str = "uv",
        *,
        member_dims: int = 0,
    ) -> None:
        defaults = dict(
            lr=check_range(self.rule_name, "lr", lr, low=0),
            damping=self._check_damping(damping),
            factors=check_choice(self.rule_name, "factors", factors, FACTOR_LAYOUTS),
        )
        super().__init__(params, defaults, member_dims)

    @classmethod
    def _check_damping(cls, damping: object) -> float | str:
        if damping == "auto":
            return "auto"
        if isinstance(damping, str):
            raise ValueError(
                f"{cls.rule_name}: damping={damping!r}; allowed: 'auto' or a number >= 0"
            )
        return check_range(cls.rule_name, "damping", damping, low=0)

    def _check_group(self, group: dict) -> None:
        super()._check_group(group)
        group["damping"] = self._check_damping(group["damping"])
        layout = check_choice(self.rule_name, "factors", group["factors"], FACTOR_LAYOUTS)
        params, md = group["params"], group["member_dims"]
        if len(params) % 2:
            raise ValueError(
                f"{self.rule_name}: a param group holds {len(params)} parameters; allowed: "
                f"pairs of factors ({'U, V' if layout == 'uv' else 'B, A'}), an even number"
            )
        for i in range(0, len(params), 2):
            left, right = params[i], params[i + 1]
            ls, rs = tuple(left.shape), tuple(right.shape)
            rank_ok = ls[-1] == rs[-1] if layout == "uv" else ls[-1] == rs[-2]
            if ls[:md] != rs[:md] or not rank_ok:
                shapes = (
                    "U [*, d1, k], V [*, d2, k]"
                    if layout == "uv"
                    else ("B [*, d_out, r], A [*, r, d_in]")
                )
                raise ValueError(
                    f"{self.rule_name}: parameters {i} and {i + 1} have shapes {ls} and {rs}; "
                    f"allowed with factors={layout!r} and member_dims={md}: {shapes} with the "
                    f"same member dims"
                )

    def step(self, closure=None):  # type: ignore[override]
        """One step of every group; every direction is computed (and checked finite) before
        any parameter moves. Returns the closure's loss, or ``None``."""
        loss = self._evaluate(closure)
        with torch.no_grad():
            steps = [s for group in self.param_groups for s in self._directions(group)]
            for p, direction, lr in steps:  # simultaneous: all from the pre-step factors
                p.sub_(direction, alpha=lr)
        return loss

    def _directions(self, group: dict) -> list[tuple[torch.Tensor, torch.Tensor, float]]:
        """``(parameter, preconditioned gradient, lr)`` of every factor with a gradient."""
        lr, damping, layout = group["lr"], group["damping"], group["factors"]
        pairs = group["params"]
        steps: list[tuple[torch.Tensor, torch.Tensor, float]] = []
        for i in range(0, len(pairs), 2):
            left, right = pairs[i], pairs[i + 1]
            if layout == "uv":  # U: G_U (VᵀV + λI)⁻¹ ; V: G_V (UᵀU + λI)⁻¹
                grams = (right.mT @ right, left.mT @ left)
            else:  # B: G_B (AAᵀ + λI)⁻¹ ; A: (BᵀB + λI)⁻¹ G_A
                grams = (right @ right.mT, left.mT @ left)
            for j, (p, gram) in enumerate(zip((left, right), grams, strict=True)):
                if p.grad is None:
                    continue
                M = _damped(gram, damping)  # [*, k, k], symmetric
                on_left = layout == "ba" and j == 1
                # X M⁻¹ = (M⁻¹ Xᵀ)ᵀ for symmetric M
                X = p.grad if on_left else p.grad.mT
                direction = self._solve(M, X, i + j, damping)
                steps.append((p, direction if on_left else direction.mT, lr))
        return steps

    def _solve(self, M: torch.Tensor, X: torch.Tensor, index: int, damping) -> torch.Tensor:
        direction, info = torch.linalg.solve_ex(M, X)
        if bool((info != 0).any()) or not bool(torch.isfinite(direction).all()):
            raise NonFiniteError(
                f"{self.rule_name}.step: the Gram matrix preconditioning parameter {index} is "
                f"singular (damping={damping!r}); no parameter was updated — "
                f"use damping='auto' or a damping > 0"
            )
        return direction

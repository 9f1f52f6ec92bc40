"""The LoRA layer itself: :class:`LoRALinear`, an ``nn.Linear`` with ``ΔW = s·B A`` (PEFT).

Private; the public names are re-exported by :mod:`gaugelab.models.lora`, which also applies
the layer to a model (injection, merging, optimizer groups). Down factor ``A`` (``lora_A``)
``[r, d_in]``, up factor ``B`` (``lora_B``) ``[d_out, r]``, ``s = α/r`` or ``α/√r`` (rsLoRA);
the layer computes ``base(x) + s · dropout(x) Aᵀ Bᵀ`` and carries its :class:`FactorRecord`.

Source: hu2021lora, §4.1 (eq. 3); PEFT ``lora.Linear``; seed 003 §0x03A, §0x07F, §0x07I.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import nn

from gaugelab.models._lora_init import (
    DEFAULT_INIT,
    MERGED,
    UNMERGED,
    FactorRecord,
    check_init,
    given_factors,
    init_factors,
    lora_scale,
    module_seed,
    zero_factor_of,
)

__all__ = ["LoRALinear", "lora_modules"]


class LoRALinear(nn.Module):
    """An ``nn.Linear`` with a LoRA update: ``base(x) + s · dropout(x) Aᵀ Bᵀ``.

    Args:
        base: the wrapped ``nn.Linear`` (weight ``[d_out, d_in]``); its weight and bias are
            frozen (``requires_grad=False``) and kept as ``base_layer``.
        r: the rank, an integer ≥ 1 (``r > min(d_in, d_out)`` is allowed).
        alpha: ``lora_alpha`` (finite); the scale is ``lora_scale(alpha, r, use_rslora)``.
        use_rslora: ``s = α/√r`` instead of ``α/r``.
        dropout: dropout probability on the adapter's input, in ``[0, 1)`` (0 uses
            ``nn.Identity``, as PEFT does, so the layer stays deterministic under ``vmap``).
        init: one of :data:`gaugelab.models.lora.INITS`: ``peft-default`` (the default,
            PEFT's start: A Kaiming-uniform, B = 0), ``standard`` (the original LoRA start:
            A ~ N(0, 1/d_in), B = 0), ``peft-gaussian``, ``reversed``, ``zero`` (each with its
            source in :func:`gaugelab.models._lora_init.init_factors`) or ``given`` (copies
            ``factors``).
        factors: ``(A [r, d_in], B [d_out, r])`` in the base weight's dtype, for ``given``.
        seed: seeds the draw through ``module_seed(seed, name)``; default 0.
        generator: draw from this CPU generator instead (exclusive with ``seed``).
        name: the module path, stored in the record.

    Attributes:
        base_layer, lora_A ``[r, d_in]``, lora_B ``[d_out, r]``, lora_dropout, r, alpha,
        use_rslora, scale (a Python float), record (:class:`FactorRecord`), merged.

    Raises:
        TypeError: ``base`` is not an ``nn.Linear`` (or is already a ``LoRALinear``).
        ValueError: a bad ``r``, ``alpha``, ``dropout``, ``init``; ``factors`` without
            ``init="given"`` or the reverse; factor shapes, dtypes or non-finite values;
            both ``seed`` and ``generator``.

    Source: hu2021lora, §4.1 (eq. 3); PEFT ``lora.Linear``; seed 003 §0x03A, §0x07F, §0x07I.
    """

    def __init__(
        self,
        base: nn.Linear,
        r: int,
        alpha: float,
        *,
        use_rslora: bool = False,
        dropout: float = 0.0,
        init: str = DEFAULT_INIT,
        factors: tuple[torch.Tensor, torch.Tensor] | None = None,
        seed: int | None = None,
        generator: torch.Generator | None = None,
        name: str = "",
    ) -> None:
        super().__init__()
        if not isinstance(base, nn.Linear):
            raise TypeError(
                f"LoRALinear: base is a {type(base).__name__} ({name!r}); allowed: nn.Linear"
            )
        scale = lora_scale(alpha, r, use_rslora)  # validates r and alpha
        if not (isinstance(dropout, int | float) and 0.0 <= dropout < 1.0):
            raise ValueError(f"LoRALinear: dropout={dropout!r}; allowed: 0 <= dropout < 1")
        check_init("LoRALinear", init)
        if (factors is not None) != (init == "given"):
            raise ValueError(
                f"LoRALinear: init={init!r} with factors={'given' if factors else None}; "
                "allowed: factors exactly when init='given'"
            )
        if seed is not None and generator is not None:
            raise ValueError("LoRALinear: both seed and generator given; allowed: one of them")
        weight = base.weight
        d_out, d_in = weight.shape
        if init == "given":
            A, B = given_factors(name, factors, r, d_in, d_out, weight.dtype)
            fields = {
                "zero_factor": zero_factor_of(A, B),
                "down_distribution": "given",
                "down_variance": None,
                "up_distribution": "given",
                "up_variance": None,
            }
            recorded_seed = None
        else:
            if generator is None:
                recorded_seed = 0 if seed is None else int(seed)
                generator = torch.Generator().manual_seed(module_seed(recorded_seed, name))
            else:
                recorded_seed = None
            A, B, fields = init_factors(
                init, r, d_in, d_out, generator=generator, dtype=weight.dtype
            )
        self.base_layer = base
        for p in base.parameters():
            p.requires_grad_(False)
        self.lora_A = nn.Parameter(A.to(weight.device))
        self.lora_B = nn.Parameter(B.to(weight.device))
        self.lora_dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.r, self.alpha, self.use_rslora, self.scale = r, alpha, bool(use_rslora), scale
        self.record = FactorRecord(
            module=name,
            d_in=d_in,
            d_out=d_out,
            r=r,
            alpha=alpha,
            use_rslora=bool(use_rslora),
            scale=scale,
            init=init,
            seed=recorded_seed,
            dtype=str(weight.dtype).split(".")[-1],
            **fields,
        )

    @property
    def merged(self) -> bool:
        """Whether ``s·B A`` is currently added into ``base_layer.weight``."""
        return self.record.merged

    def delta_weight(self) -> torch.Tensor:
        """``ΔW = s·B A`` ``[d_out, d_in]`` in the factors' dtype (computed as PEFT's
        ``get_delta_weight``: ``(B @ A) * s``)."""
        return (self.lora_B @ self.lora_A) * self.scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[..., d_in]`` → ``[..., d_out]``; a merged layer runs its base alone."""
        result = self.base_layer(x)
        if self.merged:
            return result
        return (
            result + F.linear(F.linear(self.lora_dropout(x), self.lora_A), self.lora_B) * self.scale
        )

    def merge(self) -> None:
        """``W ← W + s·B A``; the record gains ``merged=True`` and the :data:`MERGED` event.

        While merged the factors take no part in the forward pass (they get no gradient). The
        merged weight preserves the function but not the factor gauge or the optimizer moments
        of A and B (seed §0x08K); this layer keeps A and B, so :meth:`unmerge` can undo it.
        The merged state lives in the record, not in ``state_dict()``: a state dict saved while
        merged holds ``W + s·B A`` beside A and B, and loading it into an unmerged layer counts
        the update twice — unmerge first, or save the adapter (:class:`gaugelab.adapters.Adapter`).

        Raises:
            ValueError: the layer is already merged.
        """
        if self.merged:
            raise ValueError(
                f"LoRALinear.merge: module {self.record.module!r} is already merged; allowed: "
                "merge once, then unmerge"
            )
        with torch.no_grad():
            self.base_layer.weight += self.delta_weight()
        self.record = dataclasses.replace(
            self.record, merged=True, history=(*self.record.history, MERGED)
        )

    def unmerge(self) -> None:
        """``W ← W − s·B A`` (the base restored to round-off); the record gains ``UNMERGED``.

        Raises:
            ValueError: the layer is not merged.
        """
        if not self.merged:
            raise ValueError(
                f"LoRALinear.unmerge: module {self.record.module!r} is not merged; allowed: "
                "unmerge after merge"
            )
        with torch.no_grad():
            self.base_layer.weight -= self.delta_weight()
        self.record = dataclasses.replace(
            self.record, merged=False, history=(*self.record.history, UNMERGED)
        )

    def extra_repr(self) -> str:
        d_out, d_in = self.base_layer.weight.shape
        return (
            f"d_in={d_in}, d_out={d_out}, r={self.r}, alpha={self.alpha}, "
            f"scale={self.scale:.6g}, merged={self.merged}"
        )


def lora_modules(model: nn.Module) -> dict[str, LoRALinear]:
    """Path → :class:`LoRALinear` for every adapted layer of ``model``, in module order."""
    return {n: m for n, m in model.named_modules() if isinstance(m, LoRALinear)}

"""LoRA initialisations and the factor-interface record that travels with every adapter.

The record is the seed's "full ABI" (§0x07I): factor letters are not an interface, so every
adapter states its orientation, product order, which factor started at zero, the distribution
and variance of the random factor, the stored scale, the init seed, the factor-specific
learning rates when known, and whether its product was merged into the base weight (§0x08K).
Public names are re-exported by :mod:`gaugelab.models.lora`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

INITS = ("standard", "peft-default", "peft-gaussian", "reversed", "zero", "given")
"""The initialisation families of :func:`gaugelab.models.lora.inject_lora` (seed §0x07F–G);
each is described, with its source, in :func:`init_factors`."""

DEFAULT_INIT = "peft-default"
"""The default of :class:`gaugelab.models.lora.LoRALinear` and ``inject_lora``: PEFT's own
default start, so an adapter drawn here starts where PEFT's would."""

_RENAMED = {
    "gaussian": "it was PEFT's N(0, 1/r²), now 'peft-gaussian'; the original LoRA paper's "
    "Gaussian A is 'standard'",
}

RECORD_INITS = (*INITS, "unknown")
ZERO_FACTORS = ("up", "down", "both", "none", "unknown")
DOWN_LAYOUT, UP_LAYOUT, PRODUCT_ORDER = "[r, d_in]", "[d_out, r]", "up @ down"

MERGED = (
    "merged: W += s·B A; the factor gauge and the optimizer moments of A and B are not "
    "recoverable from W (seed §0x08K)"
)
UNMERGED = "unmerged: W -= s·B A; the base weight is restored to round-off"


def check_init(owner: str, init: object, *, allowed: tuple[str, ...] = INITS) -> str:
    """``init`` if it names one of ``allowed``, else a ``ValueError``.

    Raises:
        ValueError: naming ``owner``, the value and the allowed names (for a name this library
            used to accept, ``gaussian``, also what it is called now).
    """
    if isinstance(init, str) and init in allowed:
        return init
    hint = f" ({_RENAMED[init]})" if isinstance(init, str) and init in _RENAMED else ""
    raise ValueError(f"{owner}: init={init!r}; allowed: {', '.join(allowed)}{hint}")


def lora_scale(alpha: float, r: int, use_rslora: bool = False) -> float:
    """The LoRA scale ``s``: ``α/r``, or ``α/√r`` for rsLoRA.

    Args:
        alpha: ``lora_alpha``, a finite real number.
        r: the rank (rows of A), an integer ≥ 1.
        use_rslora: rank-stabilised scale ``α/√r``.

    Returns:
        ``s`` as a Python float, computed as PEFT computes it (``lora_alpha / r`` or
        ``lora_alpha / math.sqrt(r)``), so the two agree bit for bit.

    Raises:
        ValueError: ``r < 1`` or ``alpha`` not finite.

    Source: hu2021lora, §4.1 (``α/r``); kalajdzievski2023rank, Thm. 3.2 (``α/√r``); PEFT's
    ``LoraLayer.update_layer``.
    """
    if isinstance(r, bool) or not isinstance(r, int) or r < 1:
        raise ValueError(f"lora_scale: r={r!r}; allowed: an integer >= 1")
    if isinstance(alpha, bool) or not isinstance(alpha, int | float) or not math.isfinite(alpha):
        raise ValueError(f"lora_scale: alpha={alpha!r}; allowed: a finite real number")
    return alpha / math.sqrt(r) if use_rslora else alpha / r


def module_seed(seed: int, module: str) -> int:
    """The seed of one module's initialisation: sha256 of ``"gaugelab.lora:{seed}:{module}"``,
    first 8 bytes, top bit cleared. A module's factors depend only on ``(seed, module)``, not on
    which other modules are adapted or in what order."""
    digest = hashlib.sha256(f"gaugelab.lora:{seed}:{module}".encode()).digest()
    return int.from_bytes(digest[:8], "big") & (2**63 - 1)


@dataclass(frozen=True)
class FactorRecord:
    """The factor interface of one adapted module (seed §0x07I), JSON-serialisable.

    Attributes:
        module: the module path (``blocks.0.attn.q_proj``).
        d_in, d_out, r: the base layer's input and output widths and the adapter rank.
        alpha, use_rslora, scale: ``lora_alpha``, the rsLoRA flag and the stored scale ``s``.
        init: one of :data:`INITS` or ``unknown`` (an adapter read from files that carry no
            record). Records written before ``peft-default`` had its name say ``standard``
            with a ``uniform(...)`` A, or ``gaussian``; :meth:`from_dict` reads them under the
            names they have now.
        zero_factor: the factor that was zero at initialisation: ``up`` (B), ``down`` (A),
            ``both``, ``none`` or ``unknown``.
        down_distribution, down_variance, up_distribution, up_variance: the entry
            distribution and variance of A and B at initialisation (``zero`` and 0.0 for a
            zero factor; ``given`` / ``unknown`` and None when not drawn here).
        seed: the seed given to ``inject_lora`` (the module's own seed is
            ``module_seed(seed, module)``); None for a caller's generator or no draw.
        dtype: the factors' dtype (``float64``).
        down_layout, up_layout, product_order: ``[r, d_in]``, ``[d_out, r]``, ``up @ down``
            — the PEFT orientation; a record stating another is refused.
        fan_in_fan_out: the base weight is stored ``[d_in, d_out]`` (GPT-2 ``Conv1D``), so
            ``ΔW`` is written transposed; the factors keep the orientation above.
        lr_down, lr_up: the factor-specific learning rates, once
            ``lora_parameter_groups`` has built the groups; None before.
        merged: ``s·B A`` is currently added into the base weight.
        history: events in order: :data:`MERGED` / :data:`UNMERGED` texts.

    Source: seed 003 §0x07I (the ABI), §0x07F (zero-product mechanisms), §0x08K (merging).
    """

    module: str
    d_in: int
    d_out: int
    r: int
    alpha: float
    use_rslora: bool
    scale: float
    init: str
    zero_factor: str
    down_distribution: str
    down_variance: float | None
    up_distribution: str
    up_variance: float | None
    seed: int | None
    dtype: str
    down_layout: str = DOWN_LAYOUT
    up_layout: str = UP_LAYOUT
    product_order: str = PRODUCT_ORDER
    fan_in_fan_out: bool = False
    lr_down: float | None = None
    lr_up: float | None = None
    merged: bool = False
    history: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        def bad(field: str, allowed: str) -> ValueError:
            value = getattr(self, field)
            return ValueError(f"FactorRecord: {field}={value!r}; allowed: {allowed}")

        for field in ("d_in", "d_out", "r"):
            v = getattr(self, field)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise bad(field, "an integer >= 1")
        if self.init not in RECORD_INITS:
            raise bad("init", ", ".join(RECORD_INITS))
        if self.zero_factor not in ZERO_FACTORS:
            raise bad("zero_factor", ", ".join(ZERO_FACTORS))
        for field, fixed in (
            ("down_layout", DOWN_LAYOUT),
            ("up_layout", UP_LAYOUT),
            ("product_order", PRODUCT_ORDER),
        ):
            if getattr(self, field) != fixed:
                raise bad(field, f"{fixed!r} (the PEFT orientation; transpose the factors)")
        if not math.isclose(
            self.scale, lora_scale(self.alpha, self.r, self.use_rslora), rel_tol=1e-15, abs_tol=0.0
        ):
            raise bad(
                "scale", f"lora_scale(alpha={self.alpha}, r={self.r}, use_rslora={self.use_rslora})"
            )
        if not isinstance(self.history, tuple):
            object.__setattr__(self, "history", tuple(self.history))

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values (``history`` as a list)."""
        out = dataclasses.asdict(self)
        out["history"] = list(self.history)
        return out

    def to_json(self) -> str:
        """The record as one JSON object (keys sorted)."""
        return json.dumps(self.to_dict(), sort_keys=True, ensure_ascii=False)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> FactorRecord:
        """Inverse of :meth:`to_dict`.

        Raises:
            ValueError: a missing or unknown field, or a value the record refuses.
        """
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - set(fields))
        required = [n for n, f in fields.items() if f.default is dataclasses.MISSING]
        missing = [n for n in required if n not in values]
        if unknown or missing:
            raise ValueError(
                f"FactorRecord.from_dict: unknown fields {unknown}, missing fields {missing}; "
                f"allowed: {', '.join(fields)}"
            )
        values = {**values, "history": tuple(values.get("history", ()))}
        values["init"] = _current_init_name(values)
        return cls(**values)

    @classmethod
    def from_json(cls, text: str) -> FactorRecord:
        """Inverse of :meth:`to_json` (see :meth:`from_dict`)."""
        return cls.from_dict(json.loads(text))


def _current_init_name(values: Mapping[str, Any]) -> Any:
    # Records written before "peft-default" existed called PEFT's Kaiming-uniform start
    # "standard" and PEFT's N(0, 1/r²) start "gaussian"; the recorded distribution tells.
    init = values.get("init")
    if init == "standard" and str(values.get("down_distribution", "")).startswith("uniform("):
        return "peft-default"
    return "peft-gaussian" if init == "gaussian" else init


def _kaiming_uniform(shape: tuple[int, int], generator, dtype: torch.dtype) -> torch.Tensor:
    # nn.Linear's default weight init, as PEFT draws lora_A: U(−1/√fan_in, 1/√fan_in)
    w = torch.empty(shape, dtype=dtype)
    return nn.init.kaiming_uniform_(w, a=math.sqrt(5), generator=generator)


def init_factors(
    init: str,
    r: int,
    d_in: int,
    d_out: int,
    *,
    generator: torch.Generator | None,
    dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor, dict[str, Any]]:
    """Draw ``A [r, d_in]`` and ``B [d_out, r]`` (on CPU, in ``dtype``) for one family.

    Every family starts at a zero product ``B A = 0``; they differ in which factor is random
    and in its entry law (i.i.d. entries). Each with its source:

    * ``standard``: A ~ N(0, 1/d_in); B = 0. The original LoRA start, "random Gaussian A,
      zero B" (hu2021lora, §4.1; seed §0x07F), at the variance order of Init[A] in
      hayou2024impact, Θ(1/n) in the width n = d_in (seed §0x07G). Neither source fixes the
      constant: the 1 in 1/d_in is ours.
    * ``peft-default``: A ~ U(−1/√d_in, 1/√d_in), variance 1/(3 d_in); B = 0. PEFT's default
      (``init_lora_weights=True``: ``kaiming_uniform_(A, a=√5)``, nn.Linear's own weight
      init; PEFT cites Microsoft's ``loralib`` for it), bit for bit PEFT's draw from the same
      generator state. Same order as Init[A], uniform law.
    * ``peft-gaussian``: A ~ N(0, 1/r²); B = 0. PEFT's ``init_lora_weights="gaussian"``
      (std 1/r). Its variance does not scale with the width: not an Init[A] start.
    * ``reversed``: A = 0; B ~ U(−1/√r, 1/√r), variance 1/(3 r), as ``nn.Linear(r, d_out)``
      draws its weight. Init[B] of hayou2024impact (seed §0x07G: B variance Θ(1/r), A = 0);
      the seed fixes only the order, the uniform law is ours.
    * ``zero``: A = B = 0, a dead first-order point (seed §0x07F).

    Args:
        init: a family above (``given`` factors are not drawn: see :func:`given_factors`).
        r, d_in, d_out: the rank and the base layer's input and output widths, each ≥ 1.
        generator: the CPU generator every draw reads, or None for torch's global one.
        dtype: the factors' floating dtype (the base weight's).

    Returns:
        ``(A, B, fields)``, ``fields`` the record's ``zero_factor`` and distribution fields
        (the stated variance is the law's, not the sample's).

    Raises:
        ValueError: an unknown family, naming it and the families.

    Source: seed 003 §0x07F–G; hu2021lora, §4.1; hayou2024impact (arXiv:2406.08447v1),
    Init[A] / Init[B]; PEFT ``LoraLayer.reset_lora_parameters`` (0.21).
    """
    check_init("init_factors", init, allowed=tuple(i for i in INITS if i != "given"))
    A, B = torch.zeros(r, d_in, dtype=dtype), torch.zeros(d_out, r, dtype=dtype)
    zero = ("zero", 0.0)
    if init == "standard":
        A = torch.empty(r, d_in, dtype=dtype).normal_(0.0, d_in**-0.5, generator=generator)
        down, up, zero_factor = (f"normal(0, 1/{d_in})", 1 / d_in), zero, "up"
    elif init == "peft-default":
        A = _kaiming_uniform((r, d_in), generator, dtype)
        down = (f"uniform(-1/sqrt({d_in}), 1/sqrt({d_in}))", 1 / (3 * d_in))
        up, zero_factor = zero, "up"
    elif init == "peft-gaussian":
        A = torch.empty(r, d_in, dtype=dtype).normal_(0.0, 1 / r, generator=generator)
        down, up, zero_factor = (f"normal(0, (1/{r})^2)", 1 / r**2), zero, "up"
    elif init == "reversed":
        B = _kaiming_uniform((d_out, r), generator, dtype)
        up = (f"uniform(-1/sqrt({r}), 1/sqrt({r}))", 1 / (3 * r))
        down, zero_factor = zero, "down"
    else:  # zero
        down, up, zero_factor = zero, zero, "both"
    fields = {
        "zero_factor": zero_factor,
        "down_distribution": down[0],
        "down_variance": down[1],
        "up_distribution": up[0],
        "up_variance": up[1],
    }
    return A, B, fields


def zero_factor_of(A: torch.Tensor, B: torch.Tensor) -> str:
    """Which of the factors are exactly zero: ``up``, ``down``, ``both`` or ``none``."""
    a, b = not bool(A.any()), not bool(B.any())
    return {(True, True): "both", (True, False): "down", (False, True): "up"}.get((a, b), "none")


def given_factors(name, factors, r, d_in, d_out, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """User-given ``(A [r, d_in], B [d_out, r])`` for layer ``name``, checked (shapes, dtype).

    Raises:
        ValueError: not a pair, a wrong shape or dtype (naming the factor and the layer).
    """
    try:
        A, B = factors
    except (TypeError, ValueError):
        raise ValueError(
            f"LoRALinear: factors for {name!r} must be a pair (A [r, d_in], B [d_out, r])"
        ) from None
    for letter, t, shape in (("A", A, (r, d_in)), ("B", B, (d_out, r))):
        if not isinstance(t, torch.Tensor) or tuple(t.shape) != shape:
            got = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(
                f"LoRALinear: factor {letter} of {name!r} has shape {got}; allowed: {list(shape)}"
            )
        if t.dtype != dtype:
            raise ValueError(
                f"LoRALinear: factor {letter} of {name!r} is {t.dtype}; allowed: "
                f"the base weight's dtype {dtype} (cast explicitly)"
            )
        if not bool(torch.isfinite(t).all()):
            raise ValueError(f"LoRALinear: factor {letter} of {name!r} has non-finite values")
    return A.detach().clone().cpu(), B.detach().clone().cpu()

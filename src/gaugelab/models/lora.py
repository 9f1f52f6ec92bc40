"""The LoRA layer: PEFT's layout, injection into any module, merge, per-factor optimizer groups.

Layout and conventions are PEFT's: the down factor ``A`` (``lora_A``) is ``[r, d_in]``, the up
factor ``B`` (``lora_B``) is ``[d_out, r]``, the update is ``ΔW = s·B A`` with ``s = α/r`` or
``α/√r`` (rsLoRA), and a wrapped layer computes ``base(x) + s · dropout(x) Aᵀ Bᵀ``. Module
matching follows PEFT too: ``target_modules`` is a list of names matched as a suffix of the
module path (``key == name`` or ``key.endswith("." + name)``) or a regex string matched against
the whole path; a ``rank_pattern`` / ``alpha_pattern`` key ``p`` applies to path ``key`` when
``re.match(rf"(.*\\.)?({p})$", key)``, the first such key in the mapping's order winning (PEFT's
``get_pattern_key``; ``"^blocks\\.0\\.attn\\.q_proj"`` names exactly one module).

Every wrapped layer carries a :class:`FactorRecord` (seed §0x07I). ``r > min(d_in, d_out)`` is
accepted: the product is then rank-deficient by construction (§0x03A,
``rank(B A) ≤ min(rank B, rank A) ≤ r``), which is a property to measure, not an error.

This module applies the layer to a model (:func:`inject_lora`, :func:`merge_lora`,
:func:`unmerge_lora`, :func:`lora_parameter_groups`); the layer itself, :class:`LoRALinear`,
lives in ``_lora_layer``, its initialisations and :class:`FactorRecord` in ``_lora_init``,
PEFT's matching rules in ``_lora_match`` — all re-exported here.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

import torch
from torch import nn

from gaugelab.models._lora_init import (
    DEFAULT_INIT,
    INITS,
    MERGED,
    UNMERGED,
    FactorRecord,
    check_init,
    lora_scale,
    module_seed,
)
from gaugelab.models._lora_layer import LoRALinear, lora_modules
from gaugelab.models._lora_match import check_patterns, compile_pattern, pattern_key, target_matches
from gaugelab.models.ensemble import Ensemble

__all__ = [
    "DEFAULT_INIT",
    "INITS",
    "MERGED",
    "UNMERGED",
    "FactorRecord",
    "LoRALinear",
    "check_init",
    "inject_lora",
    "lora_modules",
    "lora_parameter_groups",
    "lora_scale",
    "merge_lora",
    "module_seed",
    "pattern_key",
    "target_matches",
    "unmerge_lora",
]


def inject_lora(
    model: nn.Module,
    target_modules: str | Sequence[str],
    r: int,
    alpha: float,
    *,
    rank_pattern: Mapping[str, int] | None = None,
    alpha_pattern: Mapping[str, float] | None = None,
    dropout: float = 0.0,
    init: str = DEFAULT_INIT,
    use_rslora: bool = False,
    factors: Mapping[str, tuple[torch.Tensor, torch.Tensor]] | None = None,
    seed: int | None = None,
    generator: torch.Generator | None = None,
    freeze_base: bool = True,
) -> dict[str, LoRALinear]:
    """Wrap the matching ``nn.Linear`` layers of ``model`` in :class:`LoRALinear`, in place.

    Args:
        model: any module (a :class:`gaugelab.models.Transformer`: ``blocks.{i}.attn.q_proj``,
            ``k_proj``, ``v_proj``, ``o_proj``, ``blocks.{i}.mlp.fc_in``, ``fc_gate``, ``fc_out``).
        target_modules: PEFT's rule (:func:`target_matches`): a list of names matched as path
            suffixes, or a regex string matched against the whole path.
        r, alpha: the default rank and ``lora_alpha``.
        rank_pattern, alpha_pattern: per-module overrides, PEFT's rule (:func:`pattern_key`).
        dropout: adapter-input dropout probability in ``[0, 1)``.
        init: ``peft-default`` (the default: PEFT's default start, A ~ U(−1/√d_in, 1/√d_in)
            by ``kaiming_uniform_(a=√5)``, B = 0), ``standard`` (the original LoRA paper's
            start: A ~ N(0, 1/d_in), B = 0), ``peft-gaussian`` (A ~ N(0, 1/r²), B = 0; PEFT's
            ``"gaussian"``), ``reversed`` (A = 0, B ~ U(−1/√r, 1/√r)), ``zero`` (both 0), or
            ``given`` (``factors``); sources in :func:`gaugelab.models._lora_init.init_factors`.
            PEFT's ``init_lora_weights=False`` (both random) is not a family here: pass it as
            ``given``.
        use_rslora: ``s = α/√r``.
        factors: path → ``(A [r_m, d_in], B [d_out, r_m])`` for every adapted module, with
            ``init="given"``.
        seed: module ``m`` draws from ``torch.Generator().manual_seed(module_seed(seed, m))``,
            so its factors do not depend on the other targets (default 0).
        generator: draw every module from this CPU generator in module order instead.
        freeze_base: set ``requires_grad=False`` on every parameter that is not a LoRA factor
            (PEFT's behaviour); the wrapped base layers are frozen regardless.

    Returns:
        Path → the new :class:`LoRALinear`, in module order.

    Raises:
        ValueError: nothing matched; a match is not an ``nn.Linear`` or is already adapted;
            bad patterns, ``factors`` keys or layer arguments (see :class:`LoRALinear`).

    Source: PEFT ``LoraModel.inject_adapter`` / ``_create_and_replace`` (0.21);
    hu2021lora, §4.1; seed 003 §0x07F–G (initialisations).
    """
    if isinstance(target_modules, str):
        compile_pattern("inject_lora", "target_modules", target_modules)
    elif not target_modules or not all(isinstance(t, str) for t in target_modules):
        raise ValueError(
            f"inject_lora: target_modules={target_modules!r}; allowed: a regex "
            "string or a non-empty list of module names"
        )
    check_init("inject_lora", init)
    rank_pattern, alpha_pattern = check_patterns(rank_pattern, alpha_pattern)
    if seed is not None and generator is not None:
        raise ValueError("inject_lora: both seed and generator given; allowed: one of them")
    adapted = tuple(f"{n}." for n, m in model.named_modules() if isinstance(m, LoRALinear))
    matched: list[str] = []
    for key, module in model.named_modules():
        if not key or key.startswith(adapted) or not target_matches(target_modules, key):
            continue
        if isinstance(module, LoRALinear):
            raise ValueError(
                f"inject_lora: module {key!r} is already a LoRALinear; allowed: "
                "one adapter per module"
            )
        if not isinstance(module, nn.Linear):
            raise ValueError(
                f"inject_lora: target_modules matched {key!r} ({type(module).__name__}); "
                "allowed: nn.Linear modules only"
            )
        matched.append(key)
    if not matched:
        linear = [n for n, m in model.named_modules() if type(m) is nn.Linear]
        raise ValueError(
            f"inject_lora: target_modules={target_modules!r} matched no module; "
            f"nn.Linear modules: {', '.join(linear[:12]) or 'none'}"
        )
    if init == "given":
        given = dict(factors or {})
        missing, extra = sorted(set(matched) - set(given)), sorted(set(given) - set(matched))
        if missing or extra:
            raise ValueError(
                f"inject_lora: factors lack {missing} and have unmatched {extra}; "
                "allowed: one (A, B) pair per adapted module"
            )
    elif factors is not None:
        raise ValueError(f"inject_lora: factors given with init={init!r}; allowed: init='given'")
    layers: dict[str, LoRALinear] = {}
    for key in matched:
        rk, ak = pattern_key(rank_pattern, key), pattern_key(alpha_pattern, key)
        layer = LoRALinear(
            model.get_submodule(key),
            r if rk is None else rank_pattern[rk],
            alpha if ak is None else alpha_pattern[ak],
            use_rslora=use_rslora,
            dropout=dropout,
            init=init,
            factors=given[key] if init == "given" else None,
            seed=None if init == "given" else seed,
            generator=generator,
            name=key,
        )
        model.set_submodule(key, layer)
        layers[key] = layer
    if freeze_base:
        factor_ids = {id(p) for m in lora_modules(model).values() for p in (m.lora_A, m.lora_B)}
        for p in model.parameters():
            if id(p) not in factor_ids:
                p.requires_grad_(False)
    return layers


def merge_lora(model: nn.Module) -> list[str]:
    """Merge every :class:`LoRALinear` of ``model`` (see :meth:`LoRALinear.merge`).

    Returns:
        The merged module paths.

    Raises:
        ValueError: no adapted module, or one is already merged (nothing is changed then).
    """
    return _set_merged(model, True)


def unmerge_lora(model: nn.Module) -> list[str]:
    """Unmerge every :class:`LoRALinear` of ``model`` (see :meth:`LoRALinear.unmerge`).

    Returns:
        The unmerged module paths.

    Raises:
        ValueError: no adapted module, or one is not merged (nothing is changed then).
    """
    return _set_merged(model, False)


def _set_merged(model: nn.Module, merge: bool) -> list[str]:
    """Merge (or unmerge) every adapted layer, after checking that all of them can be."""
    layers = lora_modules(model)
    wrong = [n for n, m in layers.items() if m.merged == merge]
    if not layers or wrong:
        where, state, allowed = (
            ("merge_lora", "already merged", "a model with unmerged adapters")
            if merge
            else ("unmerge_lora", "not merged", "a model whose adapters are merged")
        )
        problem = f"{state}: {', '.join(wrong)}" if wrong else "no LoRALinear module"
        raise ValueError(f"{where}: {problem}; allowed: {allowed}")
    for m in layers.values():
        if merge:
            m.merge()
        else:
            m.unmerge()
    return list(layers)


def lora_parameter_groups(model: nn.Module, lr_A: float, lr_B: float, **options) -> list[dict]:
    """Two optimizer parameter groups: every down factor A at ``lr_A``, every up factor B at
    ``lr_B`` (factor-specific groups are part of the adapter interface, seed §0x07I).

    Args:
        model: a module with :class:`LoRALinear` layers, or an :class:`Ensemble` of such
            modules (its stacked ``[E, r, d_in]`` / ``[E, d_out, r]`` factors; the groups then
            carry ``member_dims=1`` unless ``options`` says otherwise).
        lr_A, lr_B: learning rates, finite and > 0.
        **options: further keys for both groups (``weight_decay=0.0``, …).

    Returns:
        ``[{"params": [A…], "lr": lr_A, "factor": "down", …}, {"params": [B…], "lr": lr_B,
        "factor": "up", …}]``, for any ``torch.optim.Optimizer``. The base weights are in no
        group. For a plain module, each layer's record gains ``lr_down=lr_A, lr_up=lr_B``.

    Raises:
        ValueError: a bad learning rate, or no LoRA factors in ``model``.
    """
    for name, lr in (("lr_A", lr_A), ("lr_B", lr_B)):
        if (
            isinstance(lr, bool)
            or not isinstance(lr, int | float)
            or not (math.isfinite(lr) and lr > 0)
        ):
            raise ValueError(f"lora_parameter_groups: {name}={lr!r}; allowed: a finite rate > 0")
    if isinstance(model, Ensemble):
        stacked = model.stacked_parameters()
        down = [p for n, p in stacked.items() if n.endswith(".lora_A")]
        up = [p for n, p in stacked.items() if n.endswith(".lora_B")]
        options = {"member_dims": 1, **options}
    else:
        layers = lora_modules(model)
        down, up = [m.lora_A for m in layers.values()], [m.lora_B for m in layers.values()]
        for m in layers.values():
            m.record = dataclasses.replace(m.record, lr_down=float(lr_A), lr_up=float(lr_B))
    if not down:
        raise ValueError(
            "lora_parameter_groups: model has no LoRA factors; allowed: a model "
            "after inject_lora (or an Ensemble of such models)"
        )
    return [
        {**options, "params": down, "lr": lr_A, "factor": "down"},
        {**options, "params": up, "lr": lr_B, "factor": "up"},
    ]

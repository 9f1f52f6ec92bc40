"""``adapter_config.json``: the fields of a PEFT LoRA configuration that fix ``ΔW = s·B A``.

A module's rank is read from its tensors; its ``lora_alpha`` comes from ``alpha_pattern`` (PEFT's
rule, :func:`gaugelab.models.lora.pattern_key`) or ``lora_alpha``; its scale is
``lora_scale(alpha, r, use_rslora)``. The configured rank (``rank_pattern`` or ``r``) must agree
with the tensors: PEFT's own loader refuses a file where it does not.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gaugelab.models.lora import lora_scale, pattern_key

# Fields whose truthy value means the adapter is not a plain ``ΔW = s·B A`` on the unmodified
# base (a variant's forward, extra tensors, replicated layers, parameter targets).
UNSUPPORTED = (
    "use_dora",
    "lora_bias",
    "use_qalora",
    "use_bdlora",
    "alora_invocation_tokens",
    "arrow_config",
    "velora_config",
    "monteclora_config",
    "kasa_config",
    "layer_replication",
    "target_parameters",
    "trainable_token_indices",
)
# init_lora_weights values that rewrite the base weight (W_res = W − s·B₀A₀): the saved factors
# are relative to a base the adapter files do not carry, unless PEFT converted them on saving.
BASE_MODIFYING = ("pissa", "olora", "corda", "loftq", "lora_ga")
INTERPRETED = (
    "peft_type",
    "r",
    "lora_alpha",
    "use_rslora",
    "rank_pattern",
    "alpha_pattern",
    "fan_in_fan_out",
    "target_modules",
    "lora_dropout",
    "base_model_name_or_path",
)


def _number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)


@dataclass(frozen=True)
class AdapterConfig:
    """The LoRA fields of ``adapter_config.json`` (``peft_type: "LORA"``).

    Attributes:
        r: the default rank; ``lora_alpha``: the default alpha (finite).
        target_modules: a list of module names (suffix match) or a regex string, as PEFT.
        use_rslora: ``s = α/√r`` for every module.
        rank_pattern, alpha_pattern: per-module overrides, keys PEFT's patterns.
        fan_in_fan_out: the base weights are stored ``[d_in, d_out]`` (GPT-2 ``Conv1D``).
        lora_dropout: adapter-input dropout used when the adapter is applied for training.
        base_model_name_or_path: what PEFT recorded as the base model (or None).
        extra: every other field of the file, written back unchanged.

    Source: PEFT ``LoraConfig`` (0.21).
    """

    r: int
    lora_alpha: float
    target_modules: tuple[str, ...] | str | None
    use_rslora: bool = False
    rank_pattern: Mapping[str, int] = field(default_factory=dict)
    alpha_pattern: Mapping[str, float] = field(default_factory=dict)
    fan_in_fan_out: bool = False
    lora_dropout: float = 0.0
    base_model_name_or_path: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        def bad(name: str, value: Any, allowed: str) -> ValueError:
            return ValueError(f"AdapterConfig: {name}={value!r}; allowed: {allowed}")

        if isinstance(self.r, bool) or not isinstance(self.r, int) or self.r < 1:
            raise bad("r", self.r, "an integer >= 1")
        if not _number(self.lora_alpha):
            raise bad("lora_alpha", self.lora_alpha, "a finite real number")
        for name in ("use_rslora", "fan_in_fan_out"):
            if not isinstance(getattr(self, name), bool):
                raise bad(name, getattr(self, name), "true or false")
        if not (_number(self.lora_dropout) and 0.0 <= self.lora_dropout < 1.0):
            raise bad("lora_dropout", self.lora_dropout, "0 <= lora_dropout < 1")
        targets = self.target_modules
        if isinstance(targets, list | tuple):
            if not all(isinstance(t, str) for t in targets):
                raise bad("target_modules", targets, "module names, a regex string, or null")
            object.__setattr__(self, "target_modules", tuple(targets))
        elif not (targets is None or isinstance(targets, str)):
            raise bad("target_modules", targets, "module names, a regex string, or null")
        for name, check, allowed in (
            (
                "rank_pattern",
                lambda v: not isinstance(v, bool) and isinstance(v, int) and v >= 1,
                "integers >= 1",
            ),
            ("alpha_pattern", _number, "finite real numbers"),
        ):
            patterns = getattr(self, name)
            if not isinstance(patterns, Mapping):
                raise bad(name, patterns, "a mapping of pattern → value")
            for key, value in patterns.items():
                if not isinstance(key, str) or not check(value):
                    raise bad(f"{name}[{key!r}]", value, allowed)
            object.__setattr__(self, name, dict(patterns))
        for key in (*self.rank_pattern, *self.alpha_pattern):
            pattern_key([key], "")  # raises ValueError on an invalid regex
        object.__setattr__(self, "extra", dict(self.extra))

    def rank_for(self, module: str) -> int:
        """The configured rank of ``module`` (``rank_pattern``, else ``r``)."""
        key = pattern_key(self.rank_pattern, module)
        return self.r if key is None else self.rank_pattern[key]

    def alpha_for(self, module: str) -> float:
        """The ``lora_alpha`` of ``module`` (``alpha_pattern``, else ``lora_alpha``)."""
        key = pattern_key(self.alpha_pattern, module)
        return self.lora_alpha if key is None else self.alpha_pattern[key]

    def scale_for(self, module: str, r: int) -> float:
        """``s`` of ``module`` at rank ``r``: ``lora_scale(alpha_for(module), r, use_rslora)``."""
        return lora_scale(self.alpha_for(module), r, self.use_rslora)

    @classmethod
    def from_json_dict(
        cls, values: Mapping[str, Any], *, source: str = "adapter_config.json", dora: bool = False
    ):
        """Read a parsed ``adapter_config.json``.

        Args:
            values: the parsed file; source: its name (for messages).
            dora: accept ``use_dora`` (kept in ``extra``): the caller has the base weights
                DoRA's update needs. Off, a DoRA config is refused saying so.

        Raises:
            ValueError: ``peft_type`` is not ``LORA``; ``r`` or ``lora_alpha`` missing; a field
                of the wrong type; a variant gaugelab does not represent (DoRA, ``lora_bias``,
                …, see ``UNSUPPORTED``); or a base-modifying ``init_lora_weights`` (PiSSA,
                OLoRA, CorDA, LoftQ, LoRA-GA) — each message names ``source`` and the field.
        """
        if not isinstance(values, Mapping):
            raise ValueError(f"{source}: not a JSON object; allowed: a PEFT LoRA config")
        if values.get("peft_type") != "LORA":
            raise ValueError(f"{source}: peft_type={values.get('peft_type')!r}; allowed: 'LORA'")
        for name in ("r", "lora_alpha"):
            if name not in values:
                raise ValueError(f"{source}: field {name!r} is missing; allowed: a LoRA config")
        if values.get("use_dora") and not dora:
            raise ValueError(
                f"{source}: use_dora={values['use_dora']!r}: DoRA's update m·(W₀ + s·B A)/"
                "‖W₀ + s·B A‖ − W₀ needs the base weights, which an adapter folder does not "
                "hold; allowed: a plain LoRA adapter, or a DoRA adapter with its base "
                "checkpoint given (lora inspect or compare --base)"
            )
        for name in UNSUPPORTED:
            if name == "use_dora" and dora:
                continue
            if values.get(name):
                raise ValueError(
                    f"{source}: {name}={values[name]!r} is a LoRA variant gaugelab does not read; "
                    f"allowed: a plain ΔW = s·B A adapter ({name} false or null)"
                )
        init = values.get("init_lora_weights", True)
        if isinstance(init, str) and init.lower().startswith(BASE_MODIFYING):
            raise ValueError(
                f"{source}: init_lora_weights={init!r} rewrites the base weights, so the factors "
                "are relative to a base these files do not carry; allowed: an adapter saved "
                "with PEFT's path_initial_model_for_weight_conversion (init_lora_weights true)"
            )
        get = values.get
        try:
            return cls(
                r=get("r"),
                lora_alpha=get("lora_alpha"),
                target_modules=get("target_modules"),
                use_rslora=get("use_rslora", False),
                rank_pattern=get("rank_pattern") or {},
                alpha_pattern=get("alpha_pattern") or {},
                fan_in_fan_out=get("fan_in_fan_out", False),
                lora_dropout=get("lora_dropout", 0.0),
                base_model_name_or_path=get("base_model_name_or_path"),
                extra={k: v for k, v in values.items() if k not in INTERPRETED},
            )
        except ValueError as e:
            raise ValueError(f"{source}: {e}") from None

    def to_json_dict(self) -> dict[str, Any]:
        """The ``adapter_config.json`` object: the interpreted fields over ``extra``."""
        targets = self.target_modules
        return {
            **self.extra,
            "peft_type": "LORA",
            "r": self.r,
            "lora_alpha": self.lora_alpha,
            "use_rslora": self.use_rslora,
            "rank_pattern": dict(self.rank_pattern),
            "alpha_pattern": dict(self.alpha_pattern),
            "fan_in_fan_out": self.fan_in_fan_out,
            "target_modules": list(targets) if isinstance(targets, tuple) else targets,
            "lora_dropout": self.lora_dropout,
            "base_model_name_or_path": self.base_model_name_or_path,
        }

"""PEFT's module-matching rules for LoRA: ``target_modules`` and ``rank_pattern`` /
``alpha_pattern`` keys, as PEFT 0.21 applies them. Re-exported by :mod:`gaugelab.models.lora`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence


def compile_pattern(owner: str, argument: str, pattern: str) -> re.Pattern[str]:
    """``re.compile(pattern)``; an invalid regex is a ValueError naming ``owner`` and
    ``argument``."""
    try:
        return re.compile(pattern)
    except re.error as e:
        raise ValueError(f"{owner}: {argument} {pattern!r} is not a valid regex ({e})") from None


def target_matches(target_modules: str | Sequence[str], key: str) -> bool:
    """PEFT's ``target_modules`` rule: does module path ``key`` match?

    Args:
        target_modules: a regex string (``re.fullmatch`` against the whole path), or a sequence
            of names, each matching ``key`` itself or a suffix after a dot
            (``"q_proj"`` matches ``blocks.0.attn.q_proj``; ``"attn.q_proj"`` too).
        key: a module path as ``named_modules`` gives it.

    Raises:
        ValueError: an invalid regex.

    Source: PEFT ``check_target_module_exists`` / ``match_target_against_key`` (0.21).
    """
    if isinstance(target_modules, str):
        return (
            compile_pattern("target_matches", "target_modules", target_modules).fullmatch(key)
            is not None
        )
    return key in target_modules or any(key.endswith(f".{t}") for t in target_modules)


def pattern_key(patterns: Sequence[str] | Mapping[str, object], key: str) -> str | None:
    """The first ``rank_pattern`` / ``alpha_pattern`` key that applies to module path ``key``.

    Key ``p`` applies when ``re.match(rf"(.*\\.)?({p})$", key)``: ``p`` is a regex matched at
    the end of the path, after a dot or from its start (``"q_proj"``, ``"1.attn.q_proj"``,
    ``"^blocks\\.0\\.attn\\.q_proj"`` for exactly one module). Keys are tried in order.

    Returns:
        The key, or None when none applies (the module takes the default ``r`` / ``alpha``).

    Raises:
        ValueError: an invalid regex.

    Source: PEFT ``peft.utils.other.get_pattern_key`` (0.21; PEFT returns ``key`` itself when
    nothing matches and then looks it up with the default, which is the same result).
    """
    for p in patterns:
        if compile_pattern("pattern_key", "pattern", rf"(.*\.)?({p})$").match(key):
            return p
    return None


def check_patterns(rank_pattern, alpha_pattern) -> tuple[dict, dict]:
    """``rank_pattern`` / ``alpha_pattern`` as dicts, each value checked (ranks int ≥ 1,
    alphas finite) and each key a valid regex.

    Raises:
        ValueError: naming the pattern, the key and the value.
    """
    rank_pattern, alpha_pattern = dict(rank_pattern or {}), dict(alpha_pattern or {})
    for key, value in rank_pattern.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"inject_lora: rank_pattern[{key!r}]={value!r}; allowed: int >= 1")
    for key, value in alpha_pattern.items():
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise ValueError(
                f"inject_lora: alpha_pattern[{key!r}]={value!r}; allowed: a finite real number"
            )
    for key in (*rank_pattern, *alpha_pattern):
        compile_pattern("inject_lora", "pattern", key)
    return rank_pattern, alpha_pattern

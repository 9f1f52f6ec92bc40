"""Thresholds of the d90 rule: the historical ``ratio · S_full``, the normalized gain, and the
quality transform a lower-is-better metric needs before a ratio means anything.

Source: seed 003 §0x02F.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ACCURACY",
    "QualityTransform",
    "ThresholdRule",
    "historical_threshold",
    "normalized_gain",
    "normalized_gain_threshold",
]


@dataclass(frozen=True)
class QualityTransform:
    """A metric's contract: its name, direction, and the map to a higher-is-better quality on
    which a ratio threshold is meaningful.

    Attributes:
        metric: the metric's name (``accuracy``, ``cross-entropy``).
        higher_is_better: its direction.
        name: the transform's name (``identity``, ``exp(-x)``); recorded in the result.
        fn: the map ``metric value → quality`` (``None``: identity, allowed only for a
            higher-is-better metric).
    """

    metric: str
    higher_is_better: bool
    name: str = "identity"
    fn: Callable[[float], float] | None = None

    def __post_init__(self) -> None:
        if not self.higher_is_better and self.fn is None:
            raise ValueError(
                f"QualityTransform: metric {self.metric!r} is lower-is-better and has no "
                "transform; 0.9 × a loss is meaningless (seed 003 §0x02F); allowed: a fn "
                "mapping it to a higher-is-better quality (e.g. exp(-loss))"
            )

    def __call__(self, value: float) -> float:
        return float(value) if self.fn is None else float(self.fn(value))

    def describe(self) -> dict[str, Any]:
        """JSON-able: metric, direction, transform name."""
        return {
            "metric": self.metric,
            "higher_is_better": self.higher_is_better,
            "transform": self.name,
        }


ACCURACY = QualityTransform("accuracy", True)


def historical_threshold(
    full_score: float, ratio: float = 0.9, *, transform: QualityTransform = ACCURACY
) -> float:
    """The historical target ``ratio · S_full`` on the transformed quality scale.

    Args:
        full_score: the full fine-tuning reference (in the metric's own units).
        ratio: the fraction (historically 0.9), in ``(0, 1]``.
        transform: the metric's :class:`QualityTransform` (default: accuracy).

    Returns:
        The target on the quality scale.

    Raises:
        ValueError: ``ratio`` outside ``(0, 1]``, a non-finite score, or a quality ``< 0``
            (a ratio of a signed score is meaningless).

    Source: seed 003 §0x02F (``0.9 × 85% = 76.5%``).
    """
    if not 0 < ratio <= 1:
        raise ValueError(f"historical_threshold: ratio={ratio}; allowed: 0 < ratio <= 1")
    quality = transform(full_score)
    if not math.isfinite(quality) or quality < 0:
        raise ValueError(
            f"historical_threshold: full quality {quality} ({transform.metric} "
            f"{full_score}); allowed: a finite quality >= 0 (use a transform)"
        )
    return ratio * quality


def normalized_gain(score: float, base_score: float, full_score: float) -> float:
    """``G_d = (S_d − S_base) / (S_full − S_base)``.

    Raises:
        ValueError: ``S_full == S_base`` (no gain to normalize by) or a non-finite input.

    Source: seed 003 §0x02F (the normalized-gain alternative).
    """
    values = (score, base_score, full_score)
    if not all(math.isfinite(v) for v in values):
        raise ValueError(f"normalized_gain: non-finite input {values}")
    if full_score == base_score:
        raise ValueError(f"normalized_gain: full_score == base_score == {full_score}: no gain")
    return (score - base_score) / (full_score - base_score)


def normalized_gain_threshold(
    full_score: float,
    base_score: float,
    tau: float = 0.9,
    *,
    transform: QualityTransform = ACCURACY,
) -> float:
    """The normalized-gain target ``S_base + τ (S_full − S_base)`` on the quality scale.

    Raises:
        ValueError: ``τ`` outside ``(0, 1]``, or the full reference does not beat the base.

    Source: seed 003 §0x02F (an evaluation alternative, not the original d90 definition).
    """
    if not 0 < tau <= 1:
        raise ValueError(f"normalized_gain_threshold: tau={tau}; allowed: 0 < tau <= 1")
    full, base = transform(full_score), transform(base_score)
    if not full > base:
        raise ValueError(
            f"normalized_gain_threshold: full quality {full} does not exceed the "
            f"base quality {base}; the gain is undefined"
        )
    return base + tau * (full - base)


@dataclass(frozen=True)
class ThresholdRule:
    """The declared threshold: ``historical`` (``value · S_full``) or ``normalized-gain``
    (``G_d >= value``).

    Raises:
        ValueError: another kind, or a value outside ``(0, 1]``.
    """

    kind: str = "historical"
    value: float = 0.9

    def __post_init__(self) -> None:
        if self.kind not in ("historical", "normalized-gain"):
            raise ValueError(
                f"ThresholdRule: kind={self.kind!r}; allowed: historical, normalized-gain"
            )
        if not 0 < self.value <= 1:
            raise ValueError(f"ThresholdRule: value={self.value}; allowed: 0 < value <= 1")

    def target(
        self, full_score: float, base_score: float | None, transform: QualityTransform = ACCURACY
    ) -> float:
        """The target on the quality scale.

        Raises:
            ValueError: normalized gain without a base score, or as the threshold functions.
        """
        if self.kind == "historical":
            return historical_threshold(full_score, self.value, transform=transform)
        if base_score is None:
            raise ValueError("ThresholdRule: normalized-gain needs the base score")
        return normalized_gain_threshold(full_score, base_score, self.value, transform=transform)

    def describe(self) -> str:
        """``0.9 · S_full`` or ``G_d >= 0.9``."""
        if self.kind == "historical":
            return f"{self.value:g} · S_full (historical)"
        return f"G_d = (S_d − S_base)/(S_full − S_base) >= {self.value:g} (normalized gain)"

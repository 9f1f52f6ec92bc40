"""The named errors of the low-rank study manifest's validator (seed 003 §0x00K).

One error per family of checks the seed lists — shapes, identities, split separation,
rank-policy fields, protocol envelopes, ledgers — all :class:`StudyManifestError`, a
``ValueError``. Each message starts ``validate_study_manifest:`` and names the namespace, the
object, the field, the value and what is allowed. Re-exported by
:mod:`gaugelab.study.release.study_manifest`.
"""

from __future__ import annotations

__all__ = [
    "FN",
    "IdentityError",
    "LedgerError",
    "ProtocolEnvelopeError",
    "RankPolicyFieldError",
    "ShapeError",
    "SplitSeparationError",
    "StudyManifestError",
    "require_count",
    "require_text",
]

FN = "validate_study_manifest"
"""The function every message names."""


class StudyManifestError(ValueError):
    """A low-rank study manifest that fails validation (the base of the six named errors)."""


class ShapeError(StudyManifestError):
    """A shape or axis disagrees with the objects it is derived from (§0x00G–0x00H)."""


class IdentityError(StudyManifestError):
    """An identity is missing, repeated, unresolved or collapsed: e.g. a subtraction across
    schemas ("shape equality alone is insufficient", §0x00G)."""


class SplitSeparationError(StudyManifestError):
    """Two splits share a row, or a retention or stress split shares its dataset (§0x00H)."""


class RankPolicyFieldError(StudyManifestError):
    """A rank policy without its matrix or a required policy field (§0x00I)."""


class ProtocolEnvelopeError(StudyManifestError):
    """A missing, unknown or incomplete protocol envelope (§0x00J)."""


class LedgerError(StudyManifestError):
    """The declared ledger disagrees with the one derived from the objects (§0x00K)."""


def require_text(err: type[StudyManifestError], where: str, value: object) -> None:
    """Raise ``err`` unless ``value`` is a non-empty string."""
    if not isinstance(value, str) or not value.strip():
        raise err(f"{FN}: {where}={value!r}; allowed: a non-empty string")


def require_count(
    err: type[StudyManifestError], where: str, value: object, *, low: int = 1
) -> int:
    """``value`` if it is an integer ``>= low`` (not a bool), else raise ``err``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise err(f"{FN}: {where}={value!r}; allowed: an integer >= {low}")
    return value

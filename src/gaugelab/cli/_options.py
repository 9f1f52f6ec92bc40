"""Option values every command parses alike: comma-separated numbers and names."""

from __future__ import annotations


def comma_separated(text: str, option: str, kind: type = int) -> tuple:
    """The comma-separated values of ``text`` as ``kind`` (``int`` or ``float``).

    Raises:
        ValueError: a value that is not a ``kind``, or no value at all; the message names
            ``option``, the text and what is allowed.
    """
    what = "integers" if kind is int else "numbers"
    try:
        values = tuple(kind(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ValueError(f"{option} {text!r}; allowed: comma-separated {what}") from None
    if not values:
        raise ValueError(f"{option} is empty; allowed: comma-separated {what}")
    return values


def names(text: str) -> tuple[str, ...]:
    """The comma-separated names of ``text``, stripped, empty ones left out."""
    return tuple(x.strip() for x in text.split(",") if x.strip())

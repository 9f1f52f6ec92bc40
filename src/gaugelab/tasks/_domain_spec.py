"""The identity of a two-domain corpus: :class:`TwoDomainSpec` and :func:`two_domain_spec`.

Both sources with their digests (:class:`gaugelab.tasks.sources.TextSource`), the split
fractions, the seed of the chunks' assignment and the window length. A frozen pydantic model,
so a run spec that embeds it makes every file's digest part of the run identity. Private; the
names are re-exported by :mod:`gaugelab.tasks.domains`, which documents the corpus they define.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator

from gaugelab.tasks.sources import (
    DEFAULT_PATTERNS,
    TextSource,
    path_source,
    stdlib_source,
    tiny_shakespeare_source,
)

__all__ = ["DOMAINS", "SPLITS", "TwoDomainSpec", "two_domain_spec"]

DOMAINS = ("retention", "target")
SPLITS = ("train", "val", "test")


class TwoDomainSpec(BaseModel):
    """The identity of a two-domain corpus: both sources with their digests, split and windows.

    Build one with :func:`two_domain_spec`; load the corpus with :class:`TwoDomainText`.

    Raises:
        pydantic.ValidationError (a ``ValueError``): a field out of range; a split of 0 chunks;
            a chunk of either domain not longer than ``block_size``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    retention: TextSource = Field(description="The retention domain's text (tiny-shakespeare).")
    target: TextSource = Field(description="The target domain's text (the stdlib by default).")
    val_fraction: float = Field(0.1, gt=0, lt=1, description="Fraction of chunks validating.")
    test_fraction: float = Field(0.1, gt=0, lt=1, description="Fraction of chunks held out.")
    n_chunks: int = Field(100, ge=3, description="Contiguous chunks each domain is cut into.")
    seed: int = Field(0, description="Seed of the chunks' assignment to splits.")
    block_size: int = Field(64, ge=1, description="Window length in characters (n_ctx).")

    def chunk_counts(self) -> tuple[int, int, int]:
        """``(n_train, n_val, n_test)`` chunks per domain: ``n_val`` and ``n_test`` are
        ``val_fraction · n_chunks`` and ``test_fraction · n_chunks`` rounded to the nearest
        integer (halves up), ``n_train`` the rest."""
        n_val = int(self.val_fraction * self.n_chunks + 0.5)  # nearest, halves up
        n_test = int(self.test_fraction * self.n_chunks + 0.5)
        return self.n_chunks - n_val - n_test, n_val, n_test

    def chunk_layout(self) -> dict[str, dict[str, tuple[int, ...]]]:
        """Domain → split → the indices of its chunks, sorted (no text is read).

        One ``torch.Generator`` seeded with ``seed`` draws ``torch.randperm(n_chunks)`` for the
        retention domain, then one for the target domain; in each, the first ``n_train``
        chunks are the training split, the next ``n_val`` the validation split and the last
        ``n_test`` the test split (:meth:`chunk_counts`). Every chunk is in exactly one split.
        """
        n_train, n_val, _ = self.chunk_counts()
        generator = torch.Generator().manual_seed(self.seed)
        layout = {}
        for name in DOMAINS:  # retention's permutation first, then target's
            order = torch.randperm(self.n_chunks, generator=generator).tolist()
            cut = (order[:n_train], order[n_train : n_train + n_val], order[n_train + n_val :])
            layout[name] = {split: tuple(sorted(c)) for split, c in zip(SPLITS, cut, strict=True)}
        return layout

    def with_target(self, target: TextSource) -> TwoDomainSpec:
        """This corpus with another target domain: the same retention text, chunking, split
        seed and windows (validated again).

        Raises:
            pydantic.ValidationError: the new target's chunks are too short for the windows.
        """
        return TwoDomainSpec.model_validate({**dict(self), "target": target})

    def differs_beyond_target(self, other: TwoDomainSpec) -> list[str]:
        """The fields other than ``target`` in which ``other`` differs from this corpus."""
        return [k for k in type(self).model_fields if k != "target" and getattr(self, k) !=
                getattr(other, k)]  # fmt: skip

    @model_validator(mode="after")
    def _check(self) -> TwoDomainSpec:
        counts = self.chunk_counts()
        if min(counts) < 1:
            raise ValueError(
                f"TwoDomainSpec: val_fraction={self.val_fraction}, test_fraction="
                f"{self.test_fraction} of n_chunks={self.n_chunks} give {counts} train/val/test "
                f"chunks; allowed: at least one chunk in each split"
            )
        for name in DOMAINS:
            source: TextSource = getattr(self, name)
            shortest = source.n_chars // self.n_chunks
            if shortest <= self.block_size:
                raise ValueError(
                    f"TwoDomainSpec: block_size={self.block_size}; allowed: block_size < "
                    f"{shortest}, the shortest {name} chunk ({source.n_chars} characters / "
                    f"n_chunks={self.n_chunks})"
                )
        return self


def two_domain_spec(
    target: str | os.PathLike[str] | TextSource | None = None,
    *,
    retention: str | os.PathLike[str] | TextSource | None = None,
    patterns: Sequence[str] = DEFAULT_PATTERNS,
    **fields,
) -> TwoDomainSpec:
    """The spec of the retention and target domains, reading each source once for its digests.

    Args:
        target: ``None`` (default) for :func:`~gaugelab.tasks.sources.stdlib_source` (the
            pinned stdlib files of the running interpreter), a UTF-8 file or folder for
            :func:`~gaugelab.tasks.sources.path_source`, or a :class:`TextSource`.
        retention: ``None`` (default) for the packaged tiny-shakespeare; a path or a record as
            ``target``.
        patterns: glob patterns for a folder ``target`` or ``retention``.
        **fields: the other :class:`TwoDomainSpec` fields (``val_fraction``, ``test_fraction``,
            ``n_chunks``, ``seed``, ``block_size``).

    Returns:
        A frozen :class:`TwoDomainSpec`.

    Raises:
        FileNotFoundError, ValueError: from the source constructors (a missing file, a
            non-UTF-8 file, an empty folder); pydantic.ValidationError (a ``ValueError``): a
            field out of range (see :class:`TwoDomainSpec`).
    """

    def resolve(source, default):
        if source is None:
            return default()
        return source if isinstance(source, TextSource) else path_source(source, patterns)

    return TwoDomainSpec(
        retention=resolve(retention, tiny_shakespeare_source),
        target=resolve(target, stdlib_source),
        **fields,
    )

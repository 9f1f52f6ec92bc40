"""Two text domains with one character vocabulary: the retention and the target corpus.

The low-rank studies pretrain a character model on a *retention* domain (the packaged
tiny-shakespeare) and fine-tune it on a *target* domain (by default the pinned standard-library
source of the running interpreter, :data:`gaugelab.tasks.sources.STDLIB_FILES`), measuring how
well each is predicted. :class:`TwoDomainSpec` is the corpus's identity (both sources with
their digests, the split fractions, the seed, the window length); :class:`TwoDomainText` is the
corpus it defines (the spec and its checks: ``_domain_spec``, re-exported here):

* **Splits.** Each domain's ``N``-character text is cut into ``n_chunks`` contiguous chunks,
  chunk ``i`` being characters ``[i·N // n_chunks, (i+1)·N // n_chunks)``. One
  ``torch.Generator`` seeded with ``seed`` draws ``torch.randperm(n_chunks)`` for the retention
  domain, then one for the target domain; in each, the first ``n_train`` chunks are the training
  split, the next ``n_val`` the validation split and the last ``n_test`` the test split
  (:meth:`TwoDomainSpec.chunk_counts`; :meth:`TwoDomainSpec.chunk_layout` gives the indices
  without reading the text). Every character belongs to exactly one split; a split
  holds its chunks in text order.
* **Vocabulary.** The sorted set of the characters of the retention *training* split and the
  target *training* split, plus one reserved unknown token, id ``len(chars)`` (the last). A
  character outside it (so only in a validation or test split) is encoded as the unknown token;
  :attr:`TwoDomainText.unknown` counts them per domain and split, and names them.
* **Windows.** As :class:`gaugelab.tasks.CharText`: ``x = data[o : o + block_size]``,
  ``y = data[o + 1 : o + block_size + 1]``, but a window never spans two chunks that are not
  adjacent in the text (offsets are uniform over the windows inside runs of consecutive chunks).

Nothing is downloaded. Source: karpathy2015char (character vocabulary, contiguous windows);
biderman2024lora (target learning against retention of the source domain: code as a target).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from gaugelab.tasks._batches import WindowBatches
from gaugelab.tasks._domain_spec import DOMAINS, SPLITS, TwoDomainSpec, two_domain_spec
from gaugelab.tasks.sources import read_source

__all__ = ["DOMAINS", "SPLITS", "UNKNOWN", "DomainText", "TwoDomainSpec", "TwoDomainText",
           "UnknownReport", "two_domain_spec"]  # fmt: skip

UNKNOWN = "\ufffd"
"""What :meth:`DomainText.decode` writes for the unknown token (U+FFFD REPLACEMENT CHARACTER)."""


@dataclass(frozen=True)
class UnknownReport:
    """The characters of one domain's split that are outside the shared vocabulary.

    Attributes:
        domain: ``"retention"`` or ``"target"``; split: ``"train"``, ``"val"`` or ``"test"``.
        count: how many characters of the split were encoded as the unknown token.
        characters: ``((char, count), …)`` sorted by character; the counts sum to ``count``.
    """

    domain: str
    split: str
    count: int
    characters: tuple[tuple[str, int], ...]


class _Vocabulary:
    """Sorted code points plus one unknown id; encodes code-point tensors."""

    def __init__(self, codepoints: torch.Tensor) -> None:
        self.codepoints = torch.unique(codepoints)  # sorted, [V - 1]
        self.chars = tuple(chr(c) for c in self.codepoints.tolist())
        self.unk_id = len(self.chars)

    def encode(self, cps: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``([L] long ids, [L] bool unknown mask)`` of ``[L]`` long code points."""
        ids = torch.searchsorted(self.codepoints, cps)
        unknown = self.codepoints[ids.clamp(max=self.unk_id - 1)] != cps
        return torch.where(unknown, self.unk_id, ids), unknown


def _codepoints(text: str) -> torch.Tensor:
    """``[len(text)]`` long code points of ``text``."""
    if not text:
        return torch.zeros(0, dtype=torch.long)
    return torch.frombuffer(bytearray(text.encode("utf-32-le")), dtype=torch.int32).long()


def _chunks(cps: torch.Tensor, n_chunks: int) -> list[torch.Tensor]:
    """The ``n_chunks`` contiguous chunks of ``[N]`` code points: ``[i·N // n, (i+1)·N // n)``."""
    bounds = [i * cps.numel() // n_chunks for i in range(n_chunks + 1)]
    return [cps[a:b] for a, b in itertools.pairwise(bounds)]


class DomainText(WindowBatches):
    """One domain of a :class:`TwoDomainText`: three splits over the shared vocabulary.

    The window interface is :class:`gaugelab.tasks.CharText`'s (``data``, ``get_batch``,
    ``batches``, ``encode``, ``decode``, ``d_vocab``, ``n_ctx``), with a third split, ``"test"``,
    so training code consumes either domain, or a one-domain ``CharText``, the same way.

    Attributes:
        name: ``"retention"`` or ``"target"``; source: its :class:`TextSource`; sha256: the
            source's text digest.
        chars: the shared vocabulary (``tuple[str, ...]``, sorted), without the unknown token.
        d_vocab: ``len(chars) + 1``; unk_id: ``len(chars)``, the unknown token.
        block_size, n_ctx: the window length; n_chars: characters in the domain's text.
        chunks: ``{split: tuple of chunk indices}``, sorted; disjoint, covering
            ``range(n_chunks)``.
        train_data, val_data, test_data: ``[len]`` long ids of each split (its chunks joined in
            text order).
    """

    def __init__(
        self, name: str, spec: TwoDomainSpec, cps: torch.Tensor,
        layout: dict[str, tuple[int, ...]], vocab: _Vocabulary,
    ) -> None:  # fmt: skip
        self.name, self.source, self.block_size = name, getattr(spec, name), spec.block_size
        self.sha256, self.n_chars, self._vocab = self.source.sha256, cps.numel(), vocab
        self.chars, self.unk_id, self.d_vocab = vocab.chars, vocab.unk_id, vocab.unk_id + 1
        pieces = _chunks(cps, spec.n_chunks)
        self.chunks = {split: tuple(sorted(layout[split])) for split in SPLITS}
        self._data, self._windows, self._unknown = {}, {}, {}
        for split, chunks in self.chunks.items():
            text = torch.cat([pieces[i] for i in chunks])  # code points, in text order
            self._data[split], unknown = vocab.encode(text)
            self._unknown[split] = text[unknown]
            # runs of consecutive chunks are contiguous text: windows may span their seams
            runs = itertools.groupby(
                enumerate(chunks), key=lambda ki: ki[1] - ki[0]
            )  # i − k: a run
            lengths = [sum(pieces[i].numel() for _, i in run) for _, run in runs]
            starts = [0, *itertools.accumulate(lengths)][:-1]
            counts = torch.tensor(lengths) - self.block_size  # windows per run, >= 1
            self._windows[split] = (torch.tensor(starts), counts.cumsum(0), counts)
        self.train_data, self.val_data = self._data["train"], self._data["val"]
        self.test_data = self._data["test"]

    @property
    def n_ctx(self) -> int:
        """The window length, ``block_size``."""
        return self.block_size

    def data(self, split: str) -> torch.Tensor:
        """The ``[len]`` long ids of ``split`` (``"train"``, ``"val"`` or ``"test"``).

        Raises:
            ValueError: unknown ``split``.
        """
        if split not in self._data:
            raise ValueError(f"DomainText.data: split={split!r}; allowed: {', '.join(SPLITS)}")
        return self._data[split]

    def unknown(self, split: str) -> UnknownReport:
        """The characters of ``split`` outside the vocabulary (see :class:`UnknownReport`).

        Raises:
            ValueError: unknown ``split``.
        """
        self.data(split)
        cps, counts = torch.unique(self._unknown[split], return_counts=True)
        chars = tuple((chr(c), n) for c, n in zip(cps.tolist(), counts.tolist(), strict=True))
        return UnknownReport(self.name, split, int(counts.sum()), chars)

    def encode(self, s: str) -> torch.Tensor:
        """``[len(s)]`` long ids of ``s``; characters outside the vocabulary map to ``unk_id``."""
        return self._vocab.encode(_codepoints(s))[0]

    def decode(self, ids: torch.Tensor | Sequence[int]) -> str:
        """The string of ``[L]`` ids in ``[0, d_vocab)``; ``unk_id`` decodes to :data:`UNKNOWN`.

        Raises:
            ValueError: ``ids`` is not one-dimensional or holds an id outside ``[0, d_vocab)``.
        """
        if isinstance(ids, torch.Tensor):
            if ids.dim() != 1:
                raise ValueError(
                    f"DomainText.decode: ids has shape {tuple(ids.shape)}; allowed: [L]"
                )
            ids = ids.tolist()
        table = (*self.chars, UNKNOWN)
        for i in ids:
            if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < self.d_vocab:
                raise ValueError(f"DomainText.decode: id {i!r}; allowed: 0 <= id < {self.d_vocab}")
        return "".join(table[i] for i in ids)

    def get_batch(
        self, split: str, batch_size: int, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One minibatch of windows of ``split``, drawn from ``generator``.

        Draws ``torch.randint(n_windows, (batch_size,), generator=generator)`` over the split's
        ``n_windows`` windows (those inside one run of consecutive chunks) and nothing else.

        Args:
            split: ``"train"``, ``"val"`` or ``"test"``; batch_size: ``B ≥ 1``.
            generator: a CPU ``torch.Generator``; advanced by the draw.

        Returns:
            ``(x, y)``, both ``[B, block_size]`` long; ``y[:, :-1] == x[:, 1:]``.

        Raises:
            ValueError: unknown ``split`` or ``batch_size < 1``.
            TypeError: ``generator`` is not a ``torch.Generator``.
        """
        data = self._batch_data(split, batch_size, generator)
        starts, ends, counts = self._windows[split]
        u = torch.randint(int(ends[-1]), (batch_size,), generator=generator)  # [B]
        run = torch.searchsorted(ends, u, right=True)  # [B], the run holding window u
        offsets = starts[run] + u - (ends[run] - counts[run])  # [B]
        index = offsets[:, None] + torch.arange(self.block_size)  # [B, block_size]
        return data[index], data[index + 1]

    def __repr__(self) -> str:
        sizes = " / ".join(f"{self._data[s].numel()} {s}" for s in SPLITS)
        return f"DomainText({self.name!r}, {self.source.describe()}; {sizes})"


class TwoDomainText:
    """The retention and target domains of ``spec``, split and encoded with one vocabulary.

    Reads both sources (every file's digest checked against the spec), cuts and assigns the
    chunks, builds the shared vocabulary from the two training splits and encodes every split
    (see the module docstring for each rule).

    Args:
        spec: a :class:`TwoDomainSpec` (e.g. from :func:`two_domain_spec`).
        vocabulary: optional characters to encode with instead of the training splits' (e.g.
            another corpus's ``chars``, so a model trained on it reads this text); default
            ``None`` keeps the rule above.

    Attributes:
        spec: the spec; retention, target: the two :class:`DomainText`.
        chars: the shared vocabulary, sorted (``tuple[str, ...]``); d_vocab: ``len(chars) + 1``;
            unk_id: ``len(chars)``.
        unknown: six :class:`UnknownReport`, one per domain and split (training splits: 0).
        n_unknown: total characters encoded as the unknown token.

    Raises:
        TypeError: ``spec`` is not a :class:`TwoDomainSpec`.
        FileNotFoundError, ValueError: from :func:`gaugelab.tasks.sources.read_source` (a file
            gone or changed since the spec was made).

    Source:
        karpathy2015char (character vocabulary, contiguous windows).
    """

    def __init__(self, spec: TwoDomainSpec, *, vocabulary: Sequence[str] | None = None) -> None:
        if not isinstance(spec, TwoDomainSpec):
            raise TypeError(f"TwoDomainText: spec={spec!r}; allowed: a TwoDomainSpec")
        self.spec = spec
        layouts = spec.chunk_layout()
        texts = {name: _codepoints(read_source(getattr(spec, name))) for name in DOMAINS}
        train = []  # the training code points of both domains
        for name in DOMAINS:
            pieces = _chunks(texts[name], spec.n_chunks)
            train += [pieces[i] for i in layouts[name]["train"]]
        if vocabulary is None:
            vocab = _Vocabulary(torch.cat(train))
        else:  # another corpus's vocabulary: characters outside it are unknown, train too
            chars = tuple(vocabulary)
            if not chars or any(not isinstance(c, str) or len(c) != 1 for c in chars):
                raise ValueError(
                    f"TwoDomainText: vocabulary={vocabulary!r}; allowed: single characters"
                )
            vocab = _Vocabulary(_codepoints("".join(chars)))
        self.chars, self.unk_id, self.d_vocab = vocab.chars, vocab.unk_id, vocab.unk_id + 1
        retention, target = (DomainText(n, spec, texts[n], layouts[n], vocab) for n in DOMAINS)
        self.retention, self.target = retention, target
        self.unknown = tuple(self.domain(d).unknown(s) for d in DOMAINS for s in SPLITS)
        self.n_unknown = sum(r.count for r in self.unknown)

    def domain(self, name: str) -> DomainText:
        """The :class:`DomainText` ``name`` (``"retention"`` or ``"target"``).

        Raises:
            ValueError: unknown ``name``.
        """
        if name not in DOMAINS:
            raise ValueError(f"TwoDomainText.domain: name={name!r}; allowed: {', '.join(DOMAINS)}")
        return getattr(self, name)

    def __repr__(self) -> str:
        return (
            f"TwoDomainText({self.d_vocab} tokens (1 unknown), {self.n_unknown} unknown "
            f"characters; {self.retention!r}, {self.target!r})"
        )

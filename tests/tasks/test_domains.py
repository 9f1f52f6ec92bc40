"""gaugelab.tasks.domains: the two-domain corpus — seeded chunk splits, one shared sorted
vocabulary from both training splits, the unknown token counted exactly, windows inside runs of
consecutive chunks, and the spec as the corpus's identity."""

import itertools

import pytest
import torch

from gaugelab.tasks.domains import (
    SPLITS,
    UNKNOWN,
    TwoDomainSpec,
    TwoDomainText,
    UnknownReport,
    two_domain_spec,
)
from gaugelab.tasks.sources import STDLIB_FILES, read_source

# 200 distinct characters, U+0100 … U+01C7: a window's first character names its offset
DISTINCT = "".join(chr(0x100 + k) for k in range(200))
LETTERS = "".join(chr(ord("A") + i) * 20 for i in range(10))  # chunk i of 10: letter i × 20


def small_spec(tmp_path, target: str, retention: str, **fields) -> TwoDomainSpec:
    (tmp_path / "target.txt").write_text(target, encoding="utf-8")
    (tmp_path / "retention.txt").write_text(retention, encoding="utf-8")
    options = dict(n_chunks=10, block_size=4, val_fraction=0.2, test_fraction=0.2) | fields
    return two_domain_spec(tmp_path / "target.txt", retention=tmp_path / "retention.txt", **options)


def expected_layout(seed: int, n_chunks: int, counts) -> dict[str, dict[str, tuple[int, ...]]]:
    """The documented rule, independently: one generator, retention's permutation first."""
    generator = torch.Generator().manual_seed(seed)
    layout = {}
    for domain in ("retention", "target"):
        order = torch.randperm(n_chunks, generator=generator).tolist()
        bounds = list(itertools.accumulate(counts, initial=0))  # [0, n_train, n_train + n_val, n]
        layout[domain] = {
            split: tuple(sorted(order[a:b]))
            for split, a, b in zip(SPLITS, bounds[:-1], bounds[1:], strict=True)
        }
    return layout


@pytest.fixture(scope="module")
def default_spec():
    return two_domain_spec()


@pytest.fixture(scope="module")
def corpus(default_spec):
    return TwoDomainText(default_spec)


def test_chunk_layout_follows_the_documented_seeded_rule(tmp_path):
    spec = small_spec(tmp_path, LETTERS, "ab" * 100, seed=5)
    assert spec.chunk_counts() == (6, 2, 2)  # 10 − 2 − 2; 0.2 · 10 = 2
    text = TwoDomainText(spec)
    layout = expected_layout(5, 10, (6, 2, 2))
    assert text.retention.chunks == layout["retention"]
    assert text.target.chunks == layout["target"]
    assert spec.chunk_layout() == layout  # the spec states it without reading the text


@pytest.mark.parametrize("domain", ["retention", "target"])
def test_splits_are_disjoint_cover_every_chunk_and_hold_the_chunk_text(corpus, domain):
    text = corpus.domain(domain)
    chunks = text.chunks
    assert set(chunks["train"]).isdisjoint(chunks["val"])
    assert set(chunks["train"]).isdisjoint(chunks["test"])
    assert set(chunks["val"]).isdisjoint(chunks["test"])
    assert sorted(itertools.chain(*chunks.values())) == list(range(100))
    assert [len(chunks[s]) for s in SPLITS] == [80, 10, 10]
    raw = read_source(text.source)
    n = len(raw)
    pieces = [raw[i * n // 100 : (i + 1) * n // 100] for i in range(100)]
    for split in SPLITS:
        expected = "".join(pieces[i] for i in chunks[split])
        assert text.data(split).numel() == len(expected)
    train = "".join(pieces[i] for i in chunks["train"])
    assert text.decode(text.train_data) == train  # training text round-trips exactly
    assert sum(text.data(s).numel() for s in SPLITS) == text.n_chars == n


def test_same_seed_same_corpus_and_batches_other_seed_other_layout(tmp_path, default_spec):
    a, b = TwoDomainText(default_spec), TwoDomainText(default_spec)
    for domain, split in itertools.product(("retention", "target"), SPLITS):
        assert torch.equal(a.domain(domain).data(split), b.domain(domain).data(split))
    assert a.chars == b.chars
    (x1, y1), (x2, y2) = next(a.target.batches(8, seed=3)), next(b.target.batches(8, seed=3))
    assert torch.equal(x1, x2) and torch.equal(y1, y2)
    other = TwoDomainText(default_spec.model_copy(update={"seed": 1}))
    assert other.target.chunks != a.target.chunks
    assert other.retention.chunks != a.retention.chunks


def test_vocabulary_is_shared_sorted_and_built_from_both_training_splits(corpus):
    assert corpus.retention.chars is corpus.target.chars is corpus.chars
    assert list(corpus.chars) == sorted(corpus.chars)
    expected = set()
    for text in (corpus.retention, corpus.target):
        raw = read_source(text.source)
        n = len(raw)
        for i in text.chunks["train"]:
            expected |= set(raw[i * n // 100 : (i + 1) * n // 100])
    assert set(corpus.chars) == expected
    assert corpus.unk_id == len(corpus.chars) == corpus.d_vocab - 1
    assert corpus.retention.d_vocab == corpus.target.d_vocab == corpus.d_vocab


def test_unknown_token_is_counted_exactly_on_a_constructed_corpus(tmp_path):
    # target chunk i is letter i × 20; the retention text is only "ab", so a target letter is
    # known iff its chunk is a training chunk: each val/test chunk adds 20 unknowns of its letter
    text = TwoDomainText(small_spec(tmp_path, LETTERS, "ab" * 100, seed=0))
    letters = {s: [chr(ord("A") + i) for i in text.target.chunks[s]] for s in SPLITS}
    assert text.chars == (*sorted(letters["train"]), "a", "b")
    reports = {(r.domain, r.split): r for r in text.unknown}
    assert len(reports) == 6
    for split in ("val", "test"):
        report = reports["target", split]
        assert report == UnknownReport("target", split, 40, tuple((c, 20) for c in letters[split]))
        assert (text.target.data(split) == text.unk_id).sum() == 40  # 2 chunks × 20
    for key in [("target", "train"), *(("retention", s) for s in SPLITS)]:
        assert reports[key].count == 0 and reports[key].characters == ()
    assert text.n_unknown == 80


def test_encode_maps_unknown_characters_to_the_reserved_token(tmp_path):
    text = TwoDomainText(small_spec(tmp_path, LETTERS, "ab" * 100)).target
    ids = text.encode("ba€")
    assert ids.tolist() == [text.chars.index("b"), text.chars.index("a"), text.unk_id]
    assert text.decode(ids) == "ba" + UNKNOWN


@pytest.mark.parametrize("split", SPLITS)
def test_windows_cover_exactly_the_windows_inside_runs_of_consecutive_chunks(tmp_path, split):
    # retention = DISTINCT × 10: every retention chunk holds all 200 characters, so none is
    # unknown and a decoded target window's first character is its offset in the target text
    text = TwoDomainText(small_spec(tmp_path, DISTINCT, DISTINCT * 10, seed=2)).target
    chunks = text.chunks[split]
    expected = set()
    for _, run in itertools.groupby(enumerate(chunks), key=lambda kv: kv[1] - kv[0]):
        run = [i for _, i in run]
        expected |= set(range(20 * run[0], 20 * (run[-1] + 1) - 4))  # start + 4 ≤ last index
    seen = set()
    for x, y in text.batches(256, seed=0, split=split, steps=20):
        assert x.shape == y.shape == (256, 4)
        assert torch.equal(y[:, :-1], x[:, 1:])
        start = torch.tensor([ord(text.decode(row)[0]) - 0x100 for row in x])
        positions = start[:, None] + torch.arange(5)  # x then y's last character
        window = torch.cat([x, y[:, -1:]], dim=1)
        assert torch.equal(window, text.encode(DISTINCT)[positions])
        seen |= set(start.tolist())
    assert seen == expected  # every valid window drawn, none across a seam of two runs


def test_a_corpus_is_usable_as_a_chartext_stream(corpus):
    stream = corpus.retention.batches(4, seed=7, split="val", steps=3)
    batches = list(stream)
    assert len(batches) == 3 and corpus.retention.n_ctx == 64
    generator = torch.Generator().manual_seed(7)
    x, y = corpus.retention.get_batch("val", 4, generator)
    assert torch.equal(x, batches[0][0]) and torch.equal(y, batches[0][1])


def test_default_spec_pins_the_stdlib_digests_in_its_identity(default_spec):
    again = two_domain_spec()
    assert again == default_spec
    assert again.model_dump_json() == default_spec.model_dump_json()
    assert default_spec.target.kind == "stdlib"
    assert [f.path for f in default_spec.target.files] == list(STDLIB_FILES)
    dumped = default_spec.model_dump_json()
    assert all(f.sha256 in dumped for f in default_spec.target.files)
    assert default_spec.retention.kind == "tiny-shakespeare"
    assert TwoDomainSpec.model_validate_json(dumped) == default_spec
    assert (default_spec.n_chunks, default_spec.seed, default_spec.block_size) == (100, 0, 64)


def test_loading_refuses_a_target_changed_since_the_spec(tmp_path):
    spec = small_spec(tmp_path, LETTERS, "ab" * 100)
    (tmp_path / "target.txt").write_text(LETTERS.lower())
    with pytest.raises(ValueError, match=r"target\.txt' has sha256 .* the file changed"):
        TwoDomainText(spec)


@pytest.mark.parametrize(
    ("fields", "message"),
    [({"block_size": 20}, r"block_size=20; allowed: block_size < 20"),
     ({"val_fraction": 0.04}, r"give \(8, 0, 2\) train/val/test"),
     ({"val_fraction": 0.5, "test_fraction": 0.5}, r"give \(0, 5, 5\)"),
     ({"n_chunks": 2}, "n_chunks"), ({"val_fraction": 0.0}, "val_fraction"),
     ({"chunks": 10}, "chunks")],
)  # fmt: skip
def test_spec_out_of_range_is_refused(tmp_path, fields, message):
    with pytest.raises(ValueError, match=message):
        small_spec(tmp_path, LETTERS, "ab" * 100, **fields)


def test_spec_is_frozen(tmp_path):
    spec = small_spec(tmp_path, LETTERS, "ab" * 100)
    with pytest.raises(ValueError):
        spec.seed = 1


def test_bad_arguments_name_the_function_and_what_is_allowed(tmp_path):
    text = TwoDomainText(small_spec(tmp_path, LETTERS, "ab" * 100))
    generator = torch.Generator()
    with pytest.raises(
        ValueError, match=r"TwoDomainText.domain: name='source'; allowed: retention"
    ):
        text.domain("source")
    with pytest.raises(ValueError, match=r"split='validation'; allowed: train, val, test"):
        text.target.get_batch("validation", 2, generator)
    with pytest.raises(ValueError, match=r"batch_size=0; allowed: an integer >= 1"):
        text.target.batches(0, seed=0)
    with pytest.raises(TypeError, match=r"generator=0; allowed: a torch.Generator"):
        text.target.get_batch("train", 2, 0)
    with pytest.raises(ValueError, match=r"steps=-1"):
        text.target.batches(2, seed=0, steps=-1)
    with pytest.raises(ValueError, match=rf"id {text.d_vocab}; allowed: 0 <= id < {text.d_vocab}"):
        text.target.decode([text.d_vocab])
    with pytest.raises(TypeError, match="allowed: a TwoDomainSpec"):
        TwoDomainText({"seed": 0})

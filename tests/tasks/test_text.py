"""gaugelab.tasks.text: CharText on tiny-shakespeare — the packaged copy and its digest,
vocabulary, split, and a seeded minibatch stream that two consumers can share."""

import gzip
import hashlib
from pathlib import Path

import pytest
import torch

import gaugelab.tasks.text as text_module
from gaugelab.tasks import TINY_SHAKESPEARE_SHA256, CharText, tiny_shakespeare_bytes


@pytest.fixture(scope="module")
def text():
    return CharText.tiny_shakespeare(block_size=64)


def test_tinyshakespeare_sha256_prefix_and_suffix(text):
    assert text.sha256 == TINY_SHAKESPEARE_SHA256
    assert TINY_SHAKESPEARE_SHA256.startswith("86c4e6aa")
    assert TINY_SHAKESPEARE_SHA256.endswith("65ed")
    assert len(TINY_SHAKESPEARE_SHA256) == 64


def test_packaged_text_has_1115394_characters_and_65_distinct():
    raw = tiny_shakespeare_bytes()
    assert hashlib.sha256(raw).hexdigest() == TINY_SHAKESPEARE_SHA256
    assert len(raw.decode("utf-8")) == 1_115_394
    assert len(set(raw.decode("utf-8"))) == 65


def test_packaged_text_equals_chartext_of_a_plain_copy(text, shakespeare):
    plain = CharText(shakespeare, block_size=64)
    assert plain.sha256 == text.sha256
    assert plain.chars == text.chars
    assert torch.equal(plain.train_data, text.train_data)
    assert torch.equal(plain.val_data, text.val_data)
    (x1, y1), (x2, y2) = next(plain.batches(4, seed=3)), next(text.batches(4, seed=3))
    assert torch.equal(x1, x2) and torch.equal(y1, y2)


def test_path_names_the_packaged_gzip_resource(text):
    assert text.path.name == "tinyshakespeare.txt.gz"
    assert "gaugelab" in str(text.path) and "tasks" in str(text.path)
    assert hashlib.sha256(gzip.decompress(text.path.read_bytes())).hexdigest() == text.sha256
    assert "tinyshakespeare.txt.gz" in repr(text)


def test_packaged_gzip_is_reproducible_no_name_no_mtime(text):
    # gzip -9 -n: header magic 1f 8b, method 8, FLG without FNAME (0x08), MTIME = 0, XFL = 2
    header = text.path.read_bytes()[:10]
    assert header[:3] == b"\x1f\x8b\x08"
    assert header[3] & 0x08 == 0
    assert header[4:8] == b"\x00\x00\x00\x00"
    assert header[8] == 2  # XFL 2: maximum compression (-9)


def test_tampered_packaged_text_is_refused(monkeypatch):
    original = text_module._read_resource

    def tampered(name):
        raw = bytearray(original(name))
        raw[0] ^= 0x01  # 'F' → 'G'
        return bytes(raw)

    monkeypatch.setattr(text_module, "_read_resource", tampered)
    bad = hashlib.sha256(tampered("tinyshakespeare.txt.gz")).hexdigest()
    with pytest.raises(
        ValueError, match=rf"tinyshakespeare\.txt\.gz.*{bad}.*{TINY_SHAKESPEARE_SHA256}"
    ):
        CharText.tiny_shakespeare(block_size=8)
    with pytest.raises(ValueError, match=bad):
        tiny_shakespeare_bytes()


def test_packaged_text_is_checked_on_every_load(monkeypatch):
    reads = []
    original = text_module._read_resource

    def counting(name):
        reads.append(name)
        return original(name)

    monkeypatch.setattr(text_module, "_read_resource", counting)
    CharText.tiny_shakespeare(block_size=8)
    CharText.tiny_shakespeare(block_size=8)
    assert reads == ["tinyshakespeare.txt.gz"] * 2


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"block_size": 0}, r"CharText\.tiny_shakespeare: block_size=0.*>= 1"),
        ({"block_size": 111_540}, r"block_size=111540.*< 111540"),  # N − int(0.9 N) val chars
        ({"block_size": 4, "split": 1.5}, r"CharText\.tiny_shakespeare: split=1\.5.*\(0, 1\)"),
    ],
)
def test_tiny_shakespeare_bad_arguments_raise_value_error(kwargs, match):
    with pytest.raises(ValueError, match=match):
        CharText.tiny_shakespeare(**kwargs)


def test_tinyshakespeare_has_65_characters(text):
    assert text.d_vocab == len(text.chars) == 65
    assert list(text.chars) == sorted(text.chars)


def test_tinyshakespeare_split_is_1003854_train_111540_val(text):
    # N = 1,115,394 characters; int(0.9 · N) = int(1003854.6) = 1,003,854
    assert text.n_chars == 1_115_394
    assert text.train_data.shape == (1_003_854,)
    assert text.val_data.shape == (111_540,)
    assert text.train_data.dtype == torch.long


def test_decode_inverts_encode(text, shakespeare):
    s = "First Citizen:\nBefore we proceed any further, hear me speak."
    assert text.decode(text.encode(s)) == s
    assert text.decode(text.train_data[:200]) == shakespeare.read_text("utf-8")[:200]


def test_same_seed_gives_identical_batches(text):
    first = list(text.batches(8, seed=5, steps=4))
    second = text.batches(8, seed=5)
    for x, y in first:
        x2, y2 = next(second)
        assert torch.equal(x, x2) and torch.equal(y, y2)


def test_different_seeds_give_different_batches(text):
    (x1, _), (x2, _) = next(text.batches(8, seed=5)), next(text.batches(8, seed=6))
    assert not torch.equal(x1, x2)


@pytest.mark.parametrize("split", ["train", "val"])
def test_targets_are_inputs_shifted_by_one(text, split):
    x, y = text.get_batch(split, 16, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (16, 64)
    assert x.dtype == y.dtype == torch.long
    assert torch.equal(y[:, :-1], x[:, 1:])
    data = text.data(split)
    offsets = torch.randint(data.numel() - 64, (16,), generator=torch.Generator().manual_seed(0))
    for o, row_x, row_y in zip(offsets.tolist(), x, y, strict=True):
        assert torch.equal(row_x, data[o : o + 64])
        assert torch.equal(row_y, data[o + 1 : o + 65])


def test_batches_is_get_batch_with_a_seeded_generator(text):
    g = torch.Generator().manual_seed(9)
    for x, y in text.batches(4, seed=9, split="val", steps=3):
        xe, ye = text.get_batch("val", 4, g)
        assert torch.equal(x, xe) and torch.equal(y, ye)


def test_small_file_vocabulary_and_split(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("hello world, é!", encoding="utf-8")
    t = CharText(path, block_size=1, split=0.5)
    assert "".join(t.chars) == "".join(sorted(set("hello world, é!")))
    assert t.decode(t.train_data) + t.decode(t.val_data) == "hello world, é!"
    assert t.n_ctx == t.block_size == 1


def test_file_is_read_once(tmp_path, monkeypatch):
    path = tmp_path / "t.txt"
    path.write_text("abcdefghij" * 10, encoding="utf-8")
    reads = []
    original = Path.read_bytes

    def counting(self):
        reads.append(self)
        return original(self)

    monkeypatch.setattr(Path, "read_bytes", counting)
    monkeypatch.setattr(Path, "read_text", lambda *a, **k: pytest.fail("read_text called"))
    monkeypatch.setattr("builtins.open", lambda *a, **k: pytest.fail("open called"))
    t = CharText(path, block_size=4)
    next(t.batches(2, seed=0))
    t.get_batch("val", 2, torch.Generator().manual_seed(1))
    assert len(reads) == 1


def test_missing_file_raises_naming_the_path(tmp_path):
    missing = tmp_path / "nope.txt"
    with pytest.raises(FileNotFoundError, match=r"nope\.txt"):
        CharText(missing, block_size=4)


def test_empty_file_raises_value_error(tmp_path):
    path = tmp_path / "empty.txt"
    path.write_bytes(b"")
    with pytest.raises(ValueError, match=r"empty\.txt.*empty"):
        CharText(path, block_size=4)


def test_non_utf8_file_raises_value_error(tmp_path):
    path = tmp_path / "latin.txt"
    path.write_bytes(b"caf\xe9 " * 10)
    with pytest.raises(ValueError, match="not UTF-8"):
        CharText(path, block_size=4)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"block_size": 0}, "block_size=0.*>= 1"),
        ({"block_size": 10}, r"block_size=10.*< 10"),  # 100 chars, split 0.9 → 10 val chars
        ({"block_size": 2.5}, "block_size=2.5"),
        ({"block_size": 4, "split": 0.0}, r"split=0.0.*\(0, 1\)"),
        ({"block_size": 4, "split": 1.0}, r"split=1.0.*\(0, 1\)"),
    ],
)
def test_bad_arguments_raise_value_error_naming_them(tmp_path, kwargs, match):
    path = tmp_path / "t.txt"
    path.write_text("abcdefghij" * 10, encoding="utf-8")
    with pytest.raises(ValueError, match=match):
        CharText(path, **kwargs)


def test_bad_batch_arguments_raise(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("abcdefghij" * 10, encoding="utf-8")
    t = CharText(path, block_size=4)
    with pytest.raises(ValueError, match="split='test'"):
        t.batches(2, seed=0, split="test")
    with pytest.raises(ValueError, match="batch_size=0"):
        t.get_batch("train", 0, torch.Generator())
    with pytest.raises(ValueError, match="not in the vocabulary"):
        t.encode("xyz")
    with pytest.raises(ValueError, match="id 10"):
        t.decode([10])


def test_a_text_too_short_for_one_block_says_how_many_characters_it_needs(tmp_path):
    path = tmp_path / "short.txt"
    path.write_text("short text\n", encoding="utf-8")  # 11 characters
    with pytest.raises(text_module.TextTooShort) as error:
        CharText(path, block_size=64)
    # 641 = the fewest N with int(0.9 N) > 64 and N − int(0.9 N) > 64 (val: 641 − 576 = 65)
    assert (error.value.n_chars, error.value.needed, error.value.block_size) == (11, 641, 64)
    assert "one block of 64 needs a text of at least 641 characters" in str(error.value)
    assert f"{str(path)!r} has 11" in str(error.value)
    path.write_text("x" * 641, encoding="utf-8")
    assert CharText(path, block_size=64).val_data.numel() == 65  # exactly enough
    path.write_text("x" * 640, encoding="utf-8")
    with pytest.raises(text_module.TextTooShort):
        CharText(path, block_size=64)


@pytest.mark.parametrize(("block_size", "split"), [(1, 0.5), (64, 0.9), (10, 0.9), (3, 0.01)])
def test_characters_needed_is_the_fewest_that_hold_a_block_in_both_splits(block_size, split):
    def holds(n):
        return min(int(split * n), n - int(split * n)) > block_size

    needed = text_module.characters_needed(block_size, split)
    assert holds(needed) and not holds(needed - 1)

"""A user's text or JSONL file as next-token windows under a token budget."""

import json

import pytest
import torch

from gaugelab.tasks import read_documents, token_windows
from gaugelab.tasks.token_windows import utf8_bytes


def test_windows_are_consecutive_under_the_budget_and_documents_join_with_eos():
    docs = ["abc", "defgh", "ij"]
    w = token_windows(docs, utf8_bytes, tokens=6, window=3, eos=0)
    stream = [97, 98, 99, 0, 100, 101, 102, 103, 104, 0, 105, 106]
    assert w.dtype == torch.int64 and w.tolist() == [stream[0:4], stream[4:8]]
    # the documents run out first: one window (4 tokens) of the 5 there are
    one = token_windows(["abcde"], utf8_bytes, tokens=100, window=3)
    assert one.tolist() == [[97, 98, 99, 100]]
    with pytest.raises(ValueError, match=r"too short: 3 token\(s\); allowed: .* = 4"):
        token_windows(["abc"], utf8_bytes, tokens=3, window=3)
    with pytest.raises(ValueError, match="tokens >= window"):
        token_windows(docs, utf8_bytes, tokens=2, window=3)


def test_documents_of_text_and_jsonl(tmp_path):
    text = tmp_path / "a.txt"
    text.write_text("one\ntwo\n")
    assert list(read_documents(text)) == ["one\ntwo\n"]
    lines = tmp_path / "b.jsonl"
    lines.write_text(json.dumps({"body": "x", "n": 1}) + "\n\n" + json.dumps({"body": "y"}) + "\n")
    assert list(read_documents(lines, field="body")) == ["x", "y"]
    with pytest.raises(ValueError, match=r"line 1 has no string field 'text'"):
        list(read_documents(lines))
    (tmp_path / "c.jsonl").write_text("{not json\n")
    with pytest.raises(ValueError, match="line 1 is not JSON"):
        list(read_documents(tmp_path / "c.jsonl"))
    (tmp_path / "d.txt").write_bytes(b"\xff\xfe")
    with pytest.raises(ValueError, match="is not UTF-8"):
        list(read_documents(tmp_path / "d.txt"))
    with pytest.raises(FileNotFoundError, match="is not a file"):
        list(read_documents(tmp_path / "missing.txt"))

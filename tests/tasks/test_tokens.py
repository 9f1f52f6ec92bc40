"""TokenText: a model's token ids windowed and streamed exactly as CharText windows its
characters; bad ids, splits and block sizes refused in one line."""

from __future__ import annotations

import pytest
import torch

from gaugelab.tasks import CharText, TokenText


def test_the_same_ids_give_the_batches_of_chartext():
    chars = CharText.tiny_shakespeare(block_size=16)
    ids = torch.cat([chars.train_data, chars.val_data])
    tokens = TokenText(ids, block_size=16, d_vocab=chars.d_vocab, name="shakespeare")
    assert torch.equal(tokens.val_data, chars.val_data)
    for split in ("train", "val"):
        ours = tokens.batches(4, seed=3, split=split, steps=3)
        theirs = chars.batches(4, seed=3, split=split, steps=3)
        for (x, y), (cx, cy) in zip(ours, theirs, strict=True):
            assert torch.equal(x, cx) and torch.equal(y, cy)


@pytest.mark.parametrize(
    ("ids", "kwargs", "message"),
    [
        (
            torch.arange(100),
            {"d_vocab": 50},
            r"token ids in \[0, 99\]; allowed: ids in \[0, d_vocab=50\)",
        ),
        (torch.zeros(2, 3, dtype=torch.long), {}, r"have shape \(2, 3\)"),
        (torch.arange(100), {"block_size": 10}, "block_size=10; allowed: 1 <= block_size < 10"),
        (torch.arange(100), {"split": 1.0}, "split=1.0"),
    ],
)
def test_refusals_name_the_argument(ids, kwargs, message):
    arguments = {"block_size": 4, "d_vocab": 100, "name": "t", **kwargs}
    with pytest.raises(ValueError, match=message):
        TokenText(ids, **arguments)

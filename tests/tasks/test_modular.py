"""gaugelab.tasks.modular: the (a op b) mod p table and its seeded train/validation split."""

import pytest
import torch

from gaugelab.tasks import ModularArithmetic


@pytest.fixture(scope="module")
def reference():
    return ModularArithmetic()  # p = 47, add, train fraction 0.4, seed 42 (PROTOCOLS §5)


def test_reference_split_is_883_train_1326_validation(reference):
    # int(0.4 · 47²) = int(883.6) = 883; 2209 − 883 = 1326
    assert reference.train_inputs.shape == (883, 3)
    assert reference.train_labels.shape == (883,)
    assert reference.val_inputs.shape == (1326, 3)
    assert reference.val_labels.shape == (1326,)
    assert (reference.n_train, reference.n_val) == (883, 1326)
    assert reference.train_inputs.dtype == reference.train_labels.dtype == torch.long


def test_sizes_are_vocabulary_p_plus_one_classes_p_context_three(reference):
    assert (reference.d_vocab, reference.n_classes, reference.n_ctx) == (48, 47, 3)


def test_splits_partition_all_pairs(reference):
    both = torch.cat([reference.train_indices, reference.val_indices])
    assert torch.equal(both.sort().values, torch.arange(47 * 47))


def test_split_is_the_first_indices_of_randperm_with_the_seed(reference):
    perm = torch.randperm(47 * 47, generator=torch.Generator().manual_seed(42))
    assert torch.equal(reference.train_indices, perm[:883])
    assert torch.equal(reference.val_indices, perm[883:])


def test_tokens_are_a_b_equals_with_equals_token_47(reference):
    for inputs, index in (
        (reference.train_inputs, reference.train_indices),
        (reference.val_inputs, reference.val_indices),
    ):
        assert torch.equal(inputs[:, 0], index // 47)  # row-major: i ↔ (i // p, i % p)
        assert torch.equal(inputs[:, 1], index % 47)
        assert bool((inputs[:, 2] == 47).all())
    assert reference.equals_token == 47


def test_labels_equal_a_plus_b_mod_47(reference):
    for inputs, labels in (
        (reference.train_inputs, reference.train_labels),
        (reference.val_inputs, reference.val_labels),
    ):
        a, b = inputs[:, 0].tolist(), inputs[:, 1].tolist()
        assert labels.tolist() == [(x + y) % 47 for x, y in zip(a, b, strict=True)]


@pytest.mark.parametrize(
    ("op", "fn"),
    [("subtract", lambda a, b: (a - b) % 11), ("multiply", lambda a, b: (a * b) % 11)],
)
def test_subtract_and_multiply_labels(op, fn):
    task = ModularArithmetic(p=11, op=op, train_fraction=0.5, seed=0)
    expected = [fn(i // 11, i % 11) for i in range(121)]
    assert task.labels.tolist() == expected
    assert all(0 <= c < 11 for c in task.labels.tolist())


def test_split_is_deterministic_given_seed(reference):
    again = ModularArithmetic(p=47, op="add", train_fraction=0.4, seed=42)
    assert torch.equal(again.train_inputs, reference.train_inputs)
    assert torch.equal(again.val_labels, reference.val_labels)


def test_split_differs_for_another_seed(reference):
    other = ModularArithmetic(seed=43)
    assert other.n_train == 883
    assert not torch.equal(other.train_indices, reference.train_indices)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"p": 1}, "p=1"),
        ({"p": 2.0}, "p=2.0"),
        ({"op": "divide"}, "op='divide'.*add, subtract, multiply"),
        ({"train_fraction": 0.0}, r"train_fraction=0.0.*\(0, 1\)"),
        ({"train_fraction": 1.0}, r"train_fraction=1.0.*\(0, 1\)"),
        ({"train_fraction": 1.5}, "train_fraction=1.5"),
        ({"p": 2, "train_fraction": 0.1}, "train_fraction=0.1 gives 0"),
        ({"seed": "42"}, "seed='42'"),
    ],
)
def test_bad_arguments_raise_value_error_naming_them(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ModularArithmetic(**kwargs)

"""Tests of gaugelab.study.checkpoint: safetensors + JSON checkpoints and exact resume."""

import math

import pytest
import safetensors.torch
import torch
from torch import nn

from gaugelab.optim import make_optimizer
from gaugelab.study.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from gaugelab.study.store.db import StoreError

DTYPE = torch.float64


def mlp(seed: int) -> nn.Module:
    """A 4 → 8 → 1 tanh MLP in float64, initialised from its own generator (no global RNG)."""
    model = nn.Sequential(
        nn.utils.skip_init(nn.Linear, 4, 8, dtype=DTYPE),
        nn.Tanh(),
        nn.utils.skip_init(nn.Linear, 8, 1, dtype=DTYPE),
    )
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(0.5 * torch.randn(p.shape, generator=g, dtype=DTYPE))
    return model


def dataset() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(64, 4, generator=g, dtype=DTYPE)
    return x, torch.sin(x.sum(dim=1, keepdim=True))


def train(model, optimizer, generator, steps: int) -> None:
    """``steps`` Adam steps on minibatches of 8 drawn with ``generator``."""
    x, y = dataset()
    for _ in range(steps):
        idx = torch.randint(0, x.shape[0], (8,), generator=generator)
        loss = ((model(x[idx]) - y[idx]) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def adam(model):
    return make_optimizer("adam", model.parameters(), lr=1e-2, betas=(0.8, 0.95))


def test_resumed_run_equals_the_uninterrupted_run_bit_for_bit(tmp_path):
    model, generator = mlp(0), torch.Generator().manual_seed(7)
    optimizer = adam(model)
    train(model, optimizer, generator, 10)

    first, first_gen = mlp(0), torch.Generator().manual_seed(7)
    first_opt = adam(first)
    train(first, first_opt, first_gen, 4)
    save_checkpoint(
        tmp_path,
        step=4,
        model_state=first.state_dict(),
        optimizer_state=first_opt.state_dict(),
        rng_states={"data": first_gen.get_state()},
        data_position=4 * 8,
    )
    del first, first_opt, first_gen

    ckpt = load_checkpoint(tmp_path)
    resumed = mlp(99)  # a different initialisation, overwritten by the checkpoint
    resumed.load_state_dict(ckpt.model_state)
    resumed_opt = adam(resumed)
    resumed_opt.load_state_dict(ckpt.optimizer_state)
    resumed_gen = torch.Generator()
    resumed_gen.set_state(ckpt.rng_states["data"])
    assert (ckpt.step, ckpt.data_position) == (4, 32)
    train(resumed, resumed_opt, resumed_gen, 6)

    for (name, p), q in zip(model.named_parameters(), resumed.parameters(), strict=True):
        assert q.dtype == DTYPE
        assert torch.equal(p, q), name
    for p, q in zip(model.parameters(), resumed.parameters(), strict=True):
        a, b = optimizer.state[p], resumed_opt.state[q]
        assert all(torch.equal(a[k], b[k]) for k in ("step", "exp_avg", "exp_avg_sq"))


def test_round_trip_of_model_torch_adam_and_generator(tmp_path):
    model = mlp(3)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.99))
    generator = torch.Generator().manual_seed(5)
    train(model, optimizer, generator, 2)
    path = save_checkpoint(
        tmp_path,
        step=2,
        model_state=model.state_dict(),
        optimizer_state=optimizer.state_dict(),
        rng_states={"data": generator.get_state(), "global": torch.get_rng_state()},
        data_position=16,
        extra={"best_loss": 0.25},
    )
    assert path.name == "step-00000002.json"
    ckpt = load_checkpoint(path)
    assert list(ckpt.model_state) == list(model.state_dict())
    for k, v in model.state_dict().items():
        assert torch.equal(ckpt.model_state[k], v) and ckpt.model_state[k].dtype == DTYPE
    saved = optimizer.state_dict()
    assert ckpt.optimizer_state["param_groups"] == saved["param_groups"]
    assert isinstance(ckpt.optimizer_state["param_groups"][0]["betas"], tuple)
    assert list(ckpt.optimizer_state["state"]) == [0, 1, 2, 3]  # int keys restored
    for i, state in saved["state"].items():
        for k, v in state.items():
            assert torch.equal(ckpt.optimizer_state["state"][i][k], v)
    assert torch.equal(ckpt.rng_states["data"], generator.get_state())
    assert ckpt.rng_states["data"].dtype == torch.uint8
    assert ckpt.extra == {"best_loss": 0.25}


def test_non_tensor_values_round_trip_exactly(tmp_path):
    base = torch.arange(10.0)
    extra = {
        "pair": (1, 2.5, None, True),
        "specials": [float("nan"), float("inf"), -float("inf"), -0.0, 0.1 + 0.2, 2**70],
        7: "an int key",
        "__tuple__": "a key that looks like a tag",
        "views": {"slice": base[2:5], "strided": base[::3], "whole": base},
        "nested": {(1, 2): [(3,)]},
    }
    save_checkpoint(
        tmp_path, step=0, model_state={}, optimizer_state={}, rng_states={}, data_position=0,
        extra=extra,
    )  # fmt: skip
    got = load_checkpoint(tmp_path).extra
    assert got["pair"] == (1, 2.5, None, True) and isinstance(got["pair"], tuple)
    nan, *rest = got["specials"]
    assert math.isnan(nan) and rest == [math.inf, -math.inf, 0.0, 0.1 + 0.2, 2**70]
    assert math.copysign(1.0, rest[2]) == -1.0
    assert got[7] == "an int key" and got["__tuple__"] == "a key that looks like a tag"
    assert torch.equal(got["views"]["slice"], base[2:5])
    assert torch.equal(got["views"]["strided"], base[::3])
    assert torch.equal(got["views"]["whole"], base)
    assert got["nested"] == {(1, 2): [(3,)]}


def checkpoint_at(directory, step: int):
    return save_checkpoint(
        directory,
        step=step,
        model_state={"w": torch.full((2,), float(step), dtype=DTYPE)},
        optimizer_state={"state": {}, "param_groups": []},
        rng_states={},
        data_position=step,
    )


def test_existing_checkpoint_is_never_overwritten(tmp_path):
    path = checkpoint_at(tmp_path, 3)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    with pytest.raises(FileExistsError, match="never overwritten"):
        checkpoint_at(tmp_path, 3)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
    assert load_checkpoint(path).step == 3


def test_latest_checkpoint_is_the_highest_step(tmp_path):
    assert latest_checkpoint(tmp_path / "absent") is None
    assert latest_checkpoint(tmp_path) is None
    with pytest.raises(FileNotFoundError):
        load_checkpoint(tmp_path)
    for step in (2, 10, 9):
        checkpoint_at(tmp_path, step)
    assert latest_checkpoint(tmp_path).name == "step-00000010.json"
    assert load_checkpoint(tmp_path).model_state["w"][0].item() == 10.0
    assert load_checkpoint(tmp_path / "step-00000009.safetensors").step == 9


def test_modified_tensor_file_is_detected(tmp_path):
    checkpoint_at(tmp_path, 1)
    tensors = tmp_path / "step-00000001.safetensors"
    data = bytearray(tensors.read_bytes())
    data[-1] ^= 0x01  # flip one bit of the last tensor byte
    tensors.write_bytes(bytes(data))
    with pytest.raises(StoreError, match=r"step-00000001\.safetensors: sha256"):
        load_checkpoint(tmp_path)


def test_files_are_plain_safetensors_without_pickle(tmp_path):
    checkpoint_at(tmp_path, 4)
    tensors = safetensors.torch.load_file(tmp_path / "step-00000004.safetensors")
    assert torch.equal(tensors["model/w"], torch.full((2,), 4.0, dtype=DTYPE))
    assert not list(tmp_path.glob(".*"))  # no temporary files left


def test_unstorable_values_are_refused(tmp_path):
    with pytest.raises(TypeError, match=r"model_state\['w'\]"):
        save_checkpoint(
            tmp_path, step=0, model_state={"w": [1.0]}, optimizer_state={}, rng_states={},
            data_position=0,
        )  # fmt: skip
    with pytest.raises(TypeError, match="cannot store a object"):
        save_checkpoint(
            tmp_path, step=0, model_state={}, optimizer_state={"x": object()}, rng_states={},
            data_position=0,
        )  # fmt: skip
    with pytest.raises(ValueError, match="allowed: integers ≥ 0"):
        checkpoint_at(tmp_path, -1)
    assert not list(tmp_path.iterdir())


def test_prune_keeps_the_latest_checkpoints_and_refuses_keep_zero(tmp_path):
    import pytest

    from gaugelab.study.checkpoint import latest_checkpoint, prune_checkpoints, save_checkpoint

    for step in (1, 10, 5):
        save_checkpoint(tmp_path, step=step, model_state={"w": torch.full((2,), float(step))},
                        optimizer_state={}, rng_states={}, data_position=step)  # fmt: skip
    removed = prune_checkpoints(tmp_path, keep=2)
    assert [p.name for p in removed] == ["step-00000001.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "step-00000005.json", "step-00000005.safetensors",
        "step-00000010.json", "step-00000010.safetensors",
    ]  # fmt: skip
    prune_checkpoints(tmp_path)
    assert latest_checkpoint(tmp_path).name == "step-00000010.json"
    assert len(list(tmp_path.iterdir())) == 2
    with pytest.raises(ValueError, match="keep=0"):
        prune_checkpoints(tmp_path, keep=0)


def test_a_checkpoint_on_a_full_disk_names_its_file_and_leaves_nothing_behind(
    tmp_path, monkeypatch
):
    import errno
    import os

    from gaugelab.study import checkpoint
    from gaugelab.study.runner import _summary

    def full(fd):  # as a write that found the device full
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoint.os, "fsync", full)
    with pytest.raises(OSError) as error:
        save_checkpoint(tmp_path, step=7, model_state={"w": torch.ones(2)}, optimizer_state={},
                        rng_states={}, data_position=0)  # fmt: skip
    monkeypatch.setattr(checkpoint.os, "fsync", os.fsync)
    assert error.value.errno == errno.ENOSPC
    assert error.value.filename == str(tmp_path / "step-00000007.safetensors")
    assert list(tmp_path.iterdir()) == []  # the temporary file is removed
    assert _summary(error.value).startswith(
        f"disk full while writing {tmp_path / 'step-00000007.safetensors'} — free space and "
        "rerun the same command"
    )
    assert "test_checkpoint.py:" in _summary(error.value)  # where it was raised, not the helper


def test_naming_puts_the_path_in_an_os_error_that_has_none_and_keeps_its_type():
    import errno

    from gaugelab.errors import naming

    with pytest.raises(OSError) as error, naming("/data/x.png"):
        raise OSError(errno.ENOSPC, "No space left on device")
    assert (error.value.errno, error.value.filename) == (errno.ENOSPC, "/data/x.png")
    with pytest.raises(PermissionError) as denied, naming("/data/x.png"):
        raise PermissionError(errno.EACCES, "Permission denied")
    assert denied.value.filename == "/data/x.png"
    with pytest.raises(FileExistsError) as exists, naming("/data/x.png"):
        raise FileExistsError("exists")  # no errno: unchanged
    assert (str(exists.value), exists.value.filename) == ("exists", None)
    with pytest.raises(OSError) as named, naming("/data/x.png"):
        raise OSError(errno.ENOSPC, "No space left on device", "/other")
    assert named.value.filename == "/other"

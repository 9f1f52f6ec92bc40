"""Checkpoints: model, optimizer state, RNG states, data position and step, safely on disk.

A checkpoint at step ``k`` is two files in a run's directory:

- ``step-0000000k.safetensors``: every tensor (keys ``model/<name>``, ``optimizer/<path>``,
  ``rng/<name>``, ``extra/<path>``);
- ``step-0000000k.json``: everything else, with each tensor replaced by ``{"__tensor__": key}``,
  plus the step, the data position and the sha256 of the safetensors file.

The JSON is written last and is the checkpoint's commit marker. Non-tensor values round-trip
exactly: ``None``, bools, ints, floats (NaN/±inf and −0.0 included), strings, lists, tuples
(tagged, so Adam's ``betas`` come back as a tuple) and dicts with any scalar keys (the
optimizer's integer parameter indices come back as ints). Nothing is pickled: tensors are read
with ``safetensors``. A resumed run that writes the same tensors in the same order reproduces
the uninterrupted run bit for bit.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import operator
import os
import re
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import safetensors.torch
import torch

from gaugelab.errors import naming
from gaugelab.study.store.db import StoreError

__all__ = [
    "Checkpoint",
    "latest_checkpoint",
    "load_checkpoint",
    "prune_checkpoints",
    "save_checkpoint",
]

FORMAT = "gaugelab-checkpoint"
FORMAT_VERSION = 1
_NAME = re.compile(r"step-(\d{8,})\.json")
_TAGS = ("__tensor__", "__tuple__", "__dict__", "__float__")


@dataclass(frozen=True)
class Checkpoint:
    """A loaded checkpoint.

    Attributes:
        path: the checkpoint's JSON file.
        step: the step (optimizer steps taken) it was saved after.
        model_state: name → tensor, loadable by ``model.load_state_dict``.
        optimizer_state: loadable by ``optimizer.load_state_dict``.
        rng_states: name → ``uint8`` tensor, for ``generator.set_state``.
        data_position: how far the data stream had been consumed (the caller's unit).
        extra: the caller's extra values, or ``None``.
    """

    path: Path
    step: int
    model_state: dict[str, torch.Tensor]
    optimizer_state: dict[str, Any]
    rng_states: dict[str, torch.Tensor]
    data_position: int
    extra: dict[str, Any] | None


class _Encoder:
    """Turns nested state into JSON, collecting tensors under unique path-like keys."""

    def __init__(self) -> None:
        self.tensors: dict[str, torch.Tensor] = {}
        self._storages: set[tuple[str, int]] = set()

    def tensor(self, value: torch.Tensor, key: str) -> dict[str, str]:
        if value.layout != torch.strided:
            raise TypeError(f"save_checkpoint: {key}: {value.layout} tensors are not supported")
        t = value.detach().to("cpu").contiguous()
        storage = (str(t.device), t.untyped_storage().data_ptr())
        if storage in self._storages and t.numel() > 0:  # safetensors refuses shared memory
            t = t.clone()
        self._storages.add(storage)
        name, n = key, 1
        while name in self.tensors:
            n += 1
            name = f"{key}#{n}"
        self.tensors[name] = t
        return {"__tensor__": name}

    def encode(self, value: Any, key: str, *, tensors: bool = True) -> Any:
        if isinstance(value, torch.Tensor):
            if not tensors:
                raise TypeError(f"save_checkpoint: {key}: a tensor cannot be a dict key")
            return self.tensor(value, key)
        if value is None or isinstance(value, bool | str):
            return value
        if isinstance(value, int):
            return int(value)
        if isinstance(value, float):
            x = float(value)
            return x if math.isfinite(x) else {"__float__": repr(x)}
        if isinstance(value, tuple):
            return {"__tuple__": [self.encode(v, f"{key}/{i}") for i, v in enumerate(value)]}
        if isinstance(value, list):
            return [self.encode(v, f"{key}/{i}") for i, v in enumerate(value)]
        if isinstance(value, Mapping):
            if all(isinstance(k, str) and k not in _TAGS for k in value):
                return {k: self.encode(v, f"{key}/{k}") for k, v in value.items()}
            return {
                "__dict__": [
                    [self.encode(k, key, tensors=False), self.encode(v, f"{key}/{k}")]
                    for k, v in value.items()
                ]
            }
        raise TypeError(
            f"save_checkpoint: {key}: cannot store a {type(value).__name__}; allowed: tensors, "
            "None, bool, int, float, str, and lists, tuples, dicts of these"
        )


def _decode(value: Any, tensors: Mapping[str, torch.Tensor], file: Path) -> Any:
    if isinstance(value, list):
        return [_decode(v, tensors, file) for v in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1 and next(iter(value)) in _TAGS:
        ((tag, body),) = value.items()
        if tag == "__tensor__":
            if body not in tensors:
                raise StoreError(f"{file}: refers to tensor {body!r}, absent from its tensors")
            return tensors[body]
        if tag == "__tuple__":
            return tuple(_decode(v, tensors, file) for v in body)
        if tag == "__float__":
            return float(body)
        return {_decode(k, tensors, file): _decode(v, tensors, file) for k, v in body}
    return {k: _decode(v, tensors, file) for k, v in value.items()}


def _write_atomic(path: Path, data: bytes, *, exclusive: bool) -> None:
    """Write ``data`` to a temporary file, fsync it, then move it to ``path``.

    Raises:
        FileExistsError: ``exclusive`` and ``path`` exists (checked atomically where the file
            system has hard links).
    """
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    try:
        with naming(path), open(tmp, "xb") as f:  # a full disk names the checkpoint file
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if not exclusive:
            os.replace(tmp, path)
            return
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise FileExistsError(
                f"save_checkpoint: {path} exists; checkpoints are never overwritten"
            ) from None
        except OSError:  # no hard links on this file system
            if path.exists():
                raise FileExistsError(f"save_checkpoint: {path} exists") from None
            os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def save_checkpoint(
    directory: str | os.PathLike[str],
    *,
    step: int,
    model_state: Mapping[str, torch.Tensor],
    optimizer_state: Mapping[str, Any],
    rng_states: Mapping[str, torch.Tensor],
    data_position: int,
    extra: Mapping[str, Any] | None = None,
    on_write: Callable[[Path, str], None] | None = None,
) -> Path:
    """Write the checkpoint of ``step`` into ``directory`` (created if missing).

    Args:
        directory: the run's checkpoint directory.
        step: optimizer steps taken so far (≥ 0); names the files ``step-{step:08d}.*``.
        model_state: ``model.state_dict()`` (tensors of any dtype/device; saved on CPU).
        optimizer_state: ``optimizer.state_dict()``.
        rng_states: name → generator state, e.g. ``{"data": generator.get_state()}``.
        data_position: how far the data stream has been consumed (≥ 0, caller's unit).
        extra: further JSON-able values (tensors allowed), e.g. the best validation loss.
        on_write: called as ``on_write(path, sha256)`` for the safetensors file once it is
            written, then for the JSON file *before* it is published (the run store records
            both, so a checkpoint that exists is always on record).

    Returns:
        Path of the JSON file (the checkpoint's handle for :func:`load_checkpoint`).

    Raises:
        FileExistsError: a checkpoint of ``step`` exists in ``directory``; it is left as is.
        TypeError: a value that is neither a tensor nor a plain JSON-able value, or a model or
            RNG entry that is not a tensor.
        ValueError: negative ``step`` or ``data_position``.
    """
    step, data_position = operator.index(step), operator.index(data_position)
    if step < 0 or data_position < 0:
        raise ValueError(
            f"save_checkpoint: step={step}, data_position={data_position}; allowed: integers ≥ 0"
        )
    for group, mapping in (("model_state", model_state), ("rng_states", rng_states)):
        for name, value in mapping.items():
            if not isinstance(value, torch.Tensor):
                raise TypeError(
                    f"save_checkpoint: {group}[{name!r}] is a {type(value).__name__}; "
                    "allowed: tensors"
                )
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    stem = f"step-{step:08d}"
    json_path, tensor_path = folder / f"{stem}.json", folder / f"{stem}.safetensors"
    if json_path.exists():
        raise FileExistsError(
            f"save_checkpoint: {json_path} exists; checkpoints are never overwritten"
        )

    enc = _Encoder()
    record = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "step": step,
        "data_position": data_position,
        "model": enc.encode(dict(model_state), "model"),
        "optimizer": enc.encode(dict(optimizer_state), "optimizer"),
        "rng": enc.encode(dict(rng_states), "rng"),
        "extra": None if extra is None else enc.encode(dict(extra), "extra"),
    }
    blob = safetensors.torch.save(enc.tensors, metadata={"format": FORMAT})
    record["tensors"] = tensor_path.name
    record["sha256"] = hashlib.sha256(blob).hexdigest()
    text = json.dumps(record, indent=1, ensure_ascii=False, allow_nan=False) + "\n"
    # A safetensors file without its JSON is an interrupted save, not a checkpoint: replace it.
    _write_atomic(tensor_path, blob, exclusive=False)
    data = text.encode("utf-8")
    if on_write is not None:
        on_write(tensor_path, record["sha256"])
        on_write(json_path, hashlib.sha256(data).hexdigest())
    _write_atomic(json_path, data, exclusive=True)
    return json_path


def latest_checkpoint(directory: str | os.PathLike[str]) -> Path | None:
    """The JSON file of the highest-step checkpoint in ``directory``, or ``None`` if there is
    none (or the directory does not exist)."""
    folder = Path(directory)
    if not folder.is_dir():
        return None
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := _NAME.fullmatch(p.name))]
    return max(found)[1] if found else None


def prune_checkpoints(directory: str | os.PathLike[str], keep: int = 1) -> list[Path]:
    """Delete all but the ``keep`` highest-step checkpoints in ``directory`` (both files of
    each); returns the JSON paths removed. A resumed run needs only the latest.

    Raises:
        ValueError: ``keep < 1``.
    """
    if keep < 1:
        raise ValueError(f"prune_checkpoints: keep={keep}; allowed: an integer >= 1")
    folder = Path(directory)
    if not folder.is_dir():
        return []
    found = sorted((int(m.group(1)), p) for p in folder.iterdir() if (m := _NAME.fullmatch(p.name)))
    removed = []
    for _, path in found[:-keep]:
        path.unlink()  # the commit marker first: a half-pruned checkpoint is no checkpoint
        path.with_suffix(".safetensors").unlink(missing_ok=True)
        removed.append(path)
    return removed


def load_checkpoint(path_or_directory: str | os.PathLike[str]) -> Checkpoint:
    """Read a checkpoint, verifying its tensors' sha256.

    Args:
        path_or_directory: a checkpoint's ``.json`` or ``.safetensors`` file, or a directory
            (its latest checkpoint).

    Returns:
        The :class:`Checkpoint`; tensors are on CPU in their saved dtypes.

    Raises:
        FileNotFoundError: no checkpoint there.
        StoreError: (a ``ValueError``) the files are not a gaugelab checkpoint, a tensor is
            missing, or the safetensors file's sha256 differs from the recorded one.
    """
    path = Path(path_or_directory)
    if path.is_dir():
        latest = latest_checkpoint(path)
        if latest is None:
            raise FileNotFoundError(f"load_checkpoint: no step-*.json checkpoint in {path}")
        path = latest
    elif path.suffix == ".safetensors":
        path = path.with_suffix(".json")
    if not path.is_file():
        raise FileNotFoundError(f"load_checkpoint: no checkpoint file {path}")
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise StoreError(f"{path}: not a gaugelab checkpoint ({e})") from None
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        raise StoreError(f"{path}: not a gaugelab checkpoint (no format {FORMAT!r})")
    if record.get("version") != FORMAT_VERSION:
        raise StoreError(
            f"{path}: checkpoint format version {record.get('version')!r}; this gaugelab "
            f"reads version {FORMAT_VERSION}"
        )
    try:
        tensor_path = path.with_name(Path(record["tensors"]).name)
        recorded = record["sha256"]
        parts = {k: record[k] for k in ("step", "data_position", "model", "optimizer", "rng")}
    except (KeyError, TypeError) as e:
        raise StoreError(f"{path}: incomplete gaugelab checkpoint (missing {e})") from None
    blob = tensor_path.read_bytes()
    digest = hashlib.sha256(blob).hexdigest()
    if digest != recorded:
        raise StoreError(
            f"{tensor_path}: sha256 {digest} differs from {recorded} recorded in "
            f"{path.name}; the checkpoint is corrupt or was modified"
        )
    try:
        tensors = safetensors.torch.load(blob)
    except Exception as e:  # safetensors raises its own error types
        raise StoreError(f"{tensor_path}: unreadable safetensors file ({e})") from None
    extra = record.get("extra")
    return Checkpoint(
        path=path,
        step=int(parts["step"]),
        model_state=_decode(parts["model"], tensors, path),
        optimizer_state=_decode(parts["optimizer"], tensors, path),
        rng_states=_decode(parts["rng"], tensors, path),
        data_position=int(parts["data_position"]),
        extra=None if extra is None else _decode(extra, tensors, path),
    )

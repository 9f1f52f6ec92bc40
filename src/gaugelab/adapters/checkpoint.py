"""A base model's weights on disk, read without pickle: one ``.safetensors`` file, or a Hugging
Face checkpoint folder (``model.safetensors``, or shards listed in
``model.safetensors.index.json``).

Nothing is loaded on opening: shapes come from the safetensors headers, and a weight is read
(memory-mapped, ``safetensors.safe_open``) only when asked for. A module path of an adapter
(``transformer.h.0.attn.c_attn``) names the tensor ``<path>.weight``; a checkpoint saved from
the inner model (the Hub's GPT-2 has ``h.0.attn.c_attn.weight``) or with an outer prefix is
matched by the rule of :meth:`BaseCheckpoint.key`.

    base = BaseCheckpoint.open("path/to/model")      # or path/to/model.safetensors
    base.shape("model.layers.0.self_attn.q_proj")    # (4096, 4096)
    base.weight("model.layers.0.self_attn.q_proj")   # the stored tensor, its own dtype
"""

from __future__ import annotations

import os
from pathlib import Path

import safetensors
import torch

from gaugelab.adapters.adapter import Adapter
from gaugelab.adapters.files import read_json

__all__ = ["INDEX", "SINGLE", "BaseCheckpoint"]

SINGLE = "model.safetensors"
INDEX = "model.safetensors.index.json"
_PICKLES = ("pytorch_model.bin", "pytorch_model.bin.index.json", "model.bin")
_INDEX_LIMIT = 64 << 20
"""The largest ``model.safetensors.index.json`` read, in bytes (a 70B model's is ~100 kB)."""


class BaseCheckpoint:
    """The weights of a base model: tensor name → (file, shape), read on demand.

    Args:
        files: the safetensors files; path: what was opened (for messages).

    Raises:
        ValueError: an unreadable file, or a tensor name found in two files.
    """

    def __init__(self, files: list[Path], path: Path) -> None:
        self.path = path
        self._where: dict[str, tuple[Path, tuple[int, ...], str]] = {}
        for file in files:
            try:
                handle = safetensors.safe_open(str(file), framework="pt")
            except (safetensors.SafetensorError, OSError) as e:
                raise ValueError(
                    f"BaseCheckpoint: {file} is not a readable safetensors file ({e})"
                ) from None
            with handle:
                for key in handle.keys():
                    if key in self._where:
                        raise ValueError(f"BaseCheckpoint: {key} is in {self._where[key][0]} "
                                         f"and {file}")  # fmt: skip
                    sliced = handle.get_slice(key)
                    self._where[key] = (file, tuple(sliced.get_shape()), sliced.get_dtype())

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> BaseCheckpoint:
        """Open a ``.safetensors`` file or a Hugging Face checkpoint folder.

        Raises:
            ValueError: ``path`` does not exist; is (or the folder holds only) a pickle
                checkpoint, which is never unpickled; a folder with neither
                :data:`SINGLE` nor :data:`INDEX`; an index that lists no files or a file
                missing; an unreadable file — each message names the path.
        """
        path = Path(path)
        owner = "BaseCheckpoint"
        if not path.exists():
            raise ValueError(f"{owner}: {path} does not exist; allowed: a .safetensors file or "
                             "a Hugging Face checkpoint folder")  # fmt: skip
        if path.is_file():
            if path.suffix != ".safetensors":
                raise ValueError(f"{owner}: {path} is not a .safetensors file; allowed: a "
                                 ".safetensors file or a checkpoint folder (pickle files "
                                 "(.bin, .pt) are never loaded)")  # fmt: skip
            return cls([path], path)
        if (path / SINGLE).is_file():
            return cls([path / SINGLE], path)
        if (path / INDEX).is_file():
            index = read_json(path / INDEX, owner=owner, limit=_INDEX_LIMIT)
            weight_map = index.get("weight_map") if isinstance(index, dict) else None
            if not isinstance(weight_map, dict) or not weight_map:
                raise ValueError(f"{owner}: {path / INDEX} has no weight_map of tensor → file")
            names = sorted({str(v) for v in weight_map.values()})
            files = [path / n for n in names]
            if bad := [n for n, f in zip(names, files, strict=True)
                       if Path(n).name != n or not f.is_file()]:  # fmt: skip
                raise ValueError(f"{owner}: {path / INDEX} lists {bad[0]!r}, which is not a file "
                                 f"in {path}")  # fmt: skip
            return cls(files, path)
        pickles = [p for p in _PICKLES if (path / p).is_file()]
        if pickles:
            raise ValueError(f"{owner}: {path} holds only {pickles[0]}, a pickle checkpoint, "
                             "which gaugelab never loads (unpickling runs arbitrary code); "
                             f"allowed: {SINGLE} — re-save it with save_pretrained("
                             "safe_serialization=True)")  # fmt: skip
        raise ValueError(f"{owner}: {path} holds neither {SINGLE} nor {INDEX}; allowed: a "
                         ".safetensors file or a Hugging Face checkpoint folder")  # fmt: skip

    def key(self, module: str) -> str | None:
        """The tensor of ``module``'s weight, or ``None``.

        The rule: ``<module>.weight`` itself; else the one tensor named ``<prefix>.<module>
        .weight`` (the checkpoint adds an outer prefix); else ``<module without its first
        component>.weight`` (the checkpoint is the inner model's: ``transformer.h.0.mlp.c_fc``
        → ``h.0.mlp.c_fc``). Several matches at a step are no match.
        """
        exact = f"{module}.weight"
        if exact in self._where:
            return exact
        outer = [k for k in self._where if k.endswith("." + exact)]
        if len(outer) == 1:
            return outer[0]
        if "." in module:
            inner = module.split(".", 1)[1] + ".weight"
            if inner in self._where:
                return inner
        return None

    def shape(self, module: str) -> tuple[int, ...] | None:
        """The stored shape of ``module``'s weight (``None`` if the checkpoint lacks it)."""
        key = self.key(module)
        return None if key is None else self._where[key][1]

    def weight(self, module: str) -> torch.Tensor:
        """``module``'s weight as stored (its dtype and layout), read from its file alone.

        Raises:
            ValueError: the checkpoint has no weight for ``module``.
        """
        key = self.key(module)
        if key is None:
            raise ValueError(f"BaseCheckpoint: {self.path} has no weight of module {module!r}")
        file = self._where[key][0]
        with safetensors.safe_open(str(file), framework="pt") as handle:
            return handle.get_tensor(key)

    def check(self, adapter: Adapter, label: str, func: str) -> None:
        """Every module of ``adapter`` has a weight here of the adapter's shape: ``[d_out,
        d_in]``, or ``[d_in, d_out]`` for ``fan_in_fan_out`` and for an embedding's pair
        (``A [r, num_embeddings]``, ``B [embedding_dim, r]``; the table is ``[num_embeddings,
        embedding_dim]``).

        Raises:
            ValueError: one line naming ``label``, the module, and both shapes (or that the
                checkpoint has no such module).
        """
        for module, m in adapter.modules.items():
            d_out, d_in = m.record.d_out, m.record.d_in
            flip = adapter.config.fan_in_fan_out or module in adapter.embeddings
            want = (d_in, d_out) if flip else (d_out, d_in)
            have = self.shape(module)
            if have is None:
                raise ValueError(f"{func}: {label}: module {module!r} ({d_out}×{d_in}) has no "
                                 f"weight in the base checkpoint {self.path}")  # fmt: skip
            if have != want:
                shown = "×".join(map(str, have))
                raise ValueError(
                    f"{func}: {label}: module {module!r} needs a base weight "
                    f"{want[0]}×{want[1]} but the base checkpoint {self.path} has {shown}; "
                    "allowed: adapters of that base model"
                )

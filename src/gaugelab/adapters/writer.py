"""Writing an adapter folder module by module: ``adapter_model.safetensors`` streamed to disk
as the modules come, so a composed 7B adapter is never in memory at once.

``safetensors``' own writers (``save_file``, ``serialize_file``) take every tensor at once,
which holds the whole adapter in memory; :class:`AdapterWriter` writes the same format
(safetensors' documented layout: an 8-byte little-endian header length, a JSON header of
``dtype``, ``shape`` and ``data_offsets`` per key, padded with spaces to 8 bytes, then the
tensors' bytes) one module at a time, and reads the finished file back with
``safetensors.safe_open`` before it is put in place. Every file is written to a temporary
sibling and renamed, so a folder never holds a half-written file.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import safetensors
import torch

from gaugelab.adapters.files import (
    CONFIG,
    DTYPES,
    PICKLES,
    RECORDS,
    RECORDS_FORMAT,
    WEIGHTS,
    factor_key,
)

_NAMES = {dtype: name for name, dtype in DTYPES.items()}


def _atomic_write(path: Path, fill: Callable[[Path], None]) -> None:
    """``fill`` writes a temporary sibling of ``path``, which is then renamed onto it (removed
    if ``fill`` raises)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        fill(Path(tmp))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class AdapterWriter:
    """Writes ``adapter_model.safetensors``, ``adapter_config.json`` and
    ``gaugelab_factor_records.json`` into ``folder``, the factors one module at a time
    (:meth:`add`), the rest at :meth:`finish`. Used as a context manager, an exception
    leaves ``folder`` as it was (the temporary files removed).

    Args:
        folder: created if needed; owner: who writes (for messages).
        overwrite: replace adapter files already there (off: refused).

    Raises:
        FileExistsError: ``folder`` already holds an adapter file and not ``overwrite``.
    """

    def __init__(self, folder: str | os.PathLike, *, owner: str, overwrite: bool = False) -> None:
        self.folder = Path(folder)
        existing = [n for n in (WEIGHTS, CONFIG, RECORDS, *PICKLES) if (self.folder / n).exists()]
        if existing and not overwrite:
            raise FileExistsError(
                f"{owner}: {self.folder} already holds {', '.join(existing)}; "
                "allowed: a new or empty directory, or overwrite=True"
            )
        if sys.byteorder != "little":  # safetensors stores little-endian bytes
            raise ValueError(f"{owner}: writing safetensors needs a little-endian machine")
        self.folder.mkdir(parents=True, exist_ok=True)
        self.owner = owner
        self.header: dict[str, dict[str, Any]] = {}
        self.records: dict[str, dict[str, Any]] = {}
        self._offset = 0
        fd, self._payload = tempfile.mkstemp(dir=self.folder, prefix=".payload.", suffix=".tmp")
        self._out = os.fdopen(fd, "wb")

    def add(self, module: str, A: torch.Tensor, B: torch.Tensor, record: Mapping[str, Any],
            *, embedding: bool = False) -> None:  # fmt: skip
        """Append ``A [r, d_in]`` and ``B [d_out, r]`` of ``module`` (written now, not kept)
        and its factor record's fields.

        Raises:
            ValueError: ``module`` added twice; a dtype safetensors' layout is not written for
                here (allowed: float64, float32, float16, bfloat16).
        """
        if module in self.records:
            raise ValueError(f"{self.owner}: module {module!r} is written twice")
        for half, t in (("lora_A", A), ("lora_B", B)):
            if t.dtype not in _NAMES:
                raise ValueError(f"{self.owner}: {module!r} {half} is {t.dtype}; allowed: "
                                 f"{', '.join(str(d) for d in _NAMES)}")  # fmt: skip
            data = t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy()
            key = factor_key(module, half, embedding=embedding)
            end = self._offset + data.nbytes
            self.header[key] = {"dtype": _NAMES[t.dtype], "shape": list(t.shape),
                                "data_offsets": [self._offset, end]}  # fmt: skip
            self._out.write(memoryview(data))
            self._offset = end
        self.records[module] = dict(record)

    def finish(self, config: Mapping[str, Any]) -> Path:
        """Write the three files (the factors' header, then their bytes; the config; the
        records) and check the weights file with safetensors' reader.

        Returns:
            ``folder``.
        """
        self._out.close()
        try:
            _atomic_write(self.folder / WEIGHTS, self._weights)
        finally:
            Path(self._payload).unlink(missing_ok=True)
        texts = {CONFIG: dict(config),
                 RECORDS: {"format": RECORDS_FORMAT, "version": 1, "modules": self.records}}
        for name, doc in texts.items():
            text = json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
            _atomic_write(self.folder / name, lambda tmp, t=text: tmp.write_text(t, "utf-8"))
        return self.folder

    def _weights(self, tmp: Path) -> None:
        """The header, then the payload's bytes, into ``tmp``; read back by safetensors."""
        head = json.dumps({"__metadata__": {"format": "pt"}, **self.header},
                          separators=(",", ":")).encode()  # fmt: skip
        head += b" " * (-len(head) % 8)
        with open(tmp, "wb") as out, open(self._payload, "rb") as payload:
            out.write(struct.pack("<Q", len(head)) + head)
            shutil.copyfileobj(payload, out)
        with safetensors.safe_open(str(tmp), framework="pt") as check:
            if set(check.keys()) != set(self.header):
                raise ValueError(f"{self.owner}: the written weights do not read back")

    def abort(self) -> None:
        """Remove what was written so far (the folder's earlier files are untouched)."""
        self._out.close()
        Path(self._payload).unlink(missing_ok=True)

    def __enter__(self) -> AdapterWriter:
        return self

    def __exit__(self, kind, value, traceback) -> None:
        if kind is not None:
            self.abort()

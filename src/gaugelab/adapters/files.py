"""PEFT adapter files on disk: ``adapter_model.safetensors`` + ``adapter_config.json``.

Tensors are read with ``safetensors`` only (written in its layout by
:mod:`gaugelab.adapters.writer`); a pickle checkpoint (``adapter_model.bin``) is refused, never
loaded. Keys follow ``save_pretrained``:
``base_model.model.<module path>.lora_A.weight`` and ``….lora_B.weight`` (PEFT strips the
adapter name, ``default``, from the keys it writes); an embedding's pair is
``….lora_embedding_A`` (``[r, num_embeddings]``) and ``….lora_embedding_B``
(``[embedding_dim, r]``). Whatever else a file holds — ``modules_to_save`` copies (a
classifier head), trained biases (``bias="lora_only"``: ``….base_layer.bias``) — is listed, not
analysed, and never refused for being there. The file is memory-mapped and read pair by pair
(``safetensors.safe_open``, :class:`PairReader`). gaugelab also writes
``gaugelab_factor_records.json``, the factor records of §0x07I; PEFT ignores the file.
"""

from __future__ import annotations

import json
import os
from contextlib import closing
from pathlib import Path
from typing import Any, NamedTuple

import safetensors
import torch

from gaugelab.linalg.checks import all_finite

WEIGHTS = "adapter_model.safetensors"
CONFIG = "adapter_config.json"
RECORDS = "gaugelab_factor_records.json"
PICKLES = ("adapter_model.bin", "pytorch_model.bin")
PREFIX = "base_model.model."
HALVES = {"lora_A": ".lora_A.weight", "lora_B": ".lora_B.weight"}
EMBEDDING_HALVES = {"lora_A": ".lora_embedding_A", "lora_B": ".lora_embedding_B"}
DORA = ".lora_magnitude_vector"
RECORDS_FORMAT = "gaugelab-factor-records"
CONFIG_LIMIT = 1 << 20
"""The largest ``adapter_config.json`` read, in bytes (PEFT writes about a kilobyte)."""
RECORDS_LIMIT = 256 << 20
"""The largest ``gaugelab_factor_records.json`` read, in bytes (a 7B adapter's is ~1 MB)."""
DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16,
          "BF16": torch.bfloat16}  # fmt: skip
"""The factor dtypes read and written, by their names in a safetensors header."""
JSON_DEPTH_LIMIT = 64
"""The deepest nesting of objects and arrays read (PEFT's config nests three deep)."""


class StoredPair(NamedTuple):
    """Where a module's LoRA pair lies in ``adapter_model.safetensors``, read from its header.

    Attributes:
        a_key, b_key: the keys of ``A [r, d_in]`` and ``B [d_out, r]``; a_shape, b_shape:
            their shapes; dtype: their (common) floating-point dtype.
    """

    a_key: str
    b_key: str
    a_shape: tuple[int, int]
    b_shape: tuple[int, int]
    dtype: torch.dtype


class FactorFile(NamedTuple):
    """What ``adapter_model.safetensors`` holds (its factors are not read into memory).

    Attributes:
        file: the safetensors file.
        factors: module path → :class:`StoredPair` (an embedding's pair as stored:
            ``A [r, num_embeddings]``, ``B [embedding_dim, r]``); read with :class:`PairReader`.
        embeddings: the modules whose pair is embedding LoRA.
        others: every other key → ``"[shape] dtype"`` (not read into memory).
        magnitudes: DoRA's magnitude vectors, module path → ``m [d_out]`` (read only when
            asked for, :func:`read_factors` ``dora=True``).
    """

    file: Path
    factors: dict[str, StoredPair]
    embeddings: frozenset[str]
    others: dict[str, str]
    magnitudes: dict[str, torch.Tensor]


def factor_key(module: str, half: str, *, embedding: bool = False) -> str:
    """The PEFT key of one factor: ``factor_key("blocks.0.attn.q_proj", "lora_A")`` is
    ``base_model.model.blocks.0.attn.q_proj.lora_A.weight``."""
    return f"{PREFIX}{module}{(EMBEDDING_HALVES if embedding else HALVES)[half]}"


def adapter_directory(path: str | os.PathLike, *, owner: str) -> Path:
    """The adapter directory named by ``path`` (the directory, or a file inside it).

    Raises:
        ValueError: ``path`` is (or the directory holds only) a pickle checkpoint, which is
            never unpickled; or neither the weights nor the config is there.
    """
    path = Path(path)
    folder = path.parent if path.is_file() else path
    if path.is_file() and path.name != WEIGHTS and path.name != CONFIG:
        if path.suffix in (".bin", ".pt", ".pth", ".ckpt"):
            raise ValueError(_pickle_refusal(owner, path))
        raise ValueError(
            f"{owner}: {path} is not a PEFT adapter file; allowed: a directory "
            f"holding {WEIGHTS} and {CONFIG}"
        )
    if not (folder / WEIGHTS).is_file():
        pickles = [folder / p for p in PICKLES if (folder / p).is_file()]
        if pickles:
            raise ValueError(_pickle_refusal(owner, pickles[0]))
        raise ValueError(
            f"{owner}: {folder / WEIGHTS} does not exist; allowed: a PEFT adapter "
            f"directory with {WEIGHTS} and {CONFIG}"
        )
    if not (folder / CONFIG).is_file():
        raise ValueError(f"{owner}: {folder / CONFIG} does not exist; the scale s = α/r needs it")
    return folder


def _pickle_refusal(owner: str, path: Path) -> str:
    return (
        f"{owner}: {path} is a pickle checkpoint, which gaugelab never loads (unpickling runs "
        "arbitrary code); allowed: adapter_model.safetensors — re-save it, where you trust the "
        "file, with PEFT's save_pretrained(..., safe_serialization=True)"
    )


def _nesting(text: str) -> int:
    """The deepest nesting of ``[`` / ``{`` in JSON ``text``, strings skipped."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            escaped, in_string = (False, True) if escaped else (char == "\\", char != '"')
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def read_json(file: Path, *, owner: str, limit: int) -> Any:
    """The parsed JSON of ``file``, refused before parsing when it is larger than ``limit``
    bytes or nests deeper than :data:`JSON_DEPTH_LIMIT` (a hostile file would otherwise take
    the memory or the parser's recursion).

    Raises:
        ValueError: the file is too large, too deep, not UTF-8 or not valid JSON; the message
            names the file and the limit.
    """
    size = file.stat().st_size
    if size > limit:
        raise ValueError(f"{owner}: {file} is {size} bytes; allowed: at most {limit} bytes")
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{owner}: {file} is not valid JSON ({e})") from None
    if (depth := _nesting(text)) > JSON_DEPTH_LIMIT:
        raise ValueError(
            f"{owner}: {file} nests {depth} deep; allowed: at most {JSON_DEPTH_LIMIT} levels"
        )
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{owner}: {file} is not valid JSON ({e})") from None


def read_config(folder: Path, *, owner: str) -> dict[str, Any]:
    """The parsed ``adapter_config.json`` of ``folder``.

    Raises:
        ValueError: the file is larger than :data:`CONFIG_LIMIT`, nests deeper than
            :data:`JSON_DEPTH_LIMIT`, or is not valid JSON.
    """
    return read_json(folder / CONFIG, owner=owner, limit=CONFIG_LIMIT)


def read_factors(folder: Path, *, owner: str, dora: bool = False) -> FactorFile:
    """The LoRA pairs of ``adapter_model.safetensors`` (where they lie, checked) and a list of
    everything else.

    The header is checked first (keys, shapes, dtypes: no tensor read), then every pair is
    read once, one module at a time, for the finite check, and dropped: memory holds one
    module whatever the number of layers. A :class:`PairReader` reads a pair again when asked.

    Args:
        folder: the adapter directory; owner: who reads (for messages).
        dora: read DoRA magnitude vectors (``….lora_magnitude_vector``, ``[d_out]``) into
            ``magnitudes``; off, they are refused.

    Raises:
        ValueError: an unreadable file; DoRA magnitudes unless ``dora`` (DoRA's update needs
            the base weights); a magnitude that is not 1-D, of a module without a LoRA pair
            or of an embedding; a factor that is not 2-D, not floating point, or not finite; a
            module with only one half; A and B whose ranks or dtypes differ; no LoRA pair at
            all — each naming the key.
    """
    file = folder / WEIGHTS
    try:
        handle = safetensors.safe_open(str(file), framework="pt")
    except (safetensors.SafetensorError, OSError) as e:
        raise ValueError(f"{owner}: {file} is not a readable safetensors file ({e})") from None
    halves: dict[str, dict[str, tuple[str, list[int], torch.dtype]]] = {}
    embeddings, others, magnitudes = set(), {}, {}
    with handle:
        for key in handle.keys():
            if key.endswith(DORA) and dora and key.startswith(PREFIX):
                magnitudes[key[len(PREFIX) : -len(DORA)]] = handle.get_tensor(key)
                continue
            if key.endswith(DORA):
                raise ValueError(
                    f"{owner}: {file}: {key} is a DoRA magnitude (use_dora); DoRA's update "
                    "m·(W₀ + s·B A)/‖W₀ + s·B A‖ − W₀ needs the base weights, which an adapter "
                    "folder does not hold; allowed: LoRA adapters"
                )
            found = [(h, emb) for emb, table in ((False, HALVES), (True, EMBEDDING_HALVES))
                     for h, suffix in table.items() if key.endswith(suffix)]  # fmt: skip
            module = ""
            if found and key.startswith(PREFIX):
                half, emb = found[0]
                table = EMBEDDING_HALVES if emb else HALVES
                module = key[len(PREFIX) : -len(table[half])]
            if not module and any(f".{h}" in key for h in ("lora_A", "lora_B", "lora_embedding")):
                raise ValueError(  # a factor in another layout must not pass for "other"
                    f"{owner}: {file}: key {key!r} is not a LoRA factor in PEFT's layout; "
                    f"allowed: {PREFIX}<module>.lora_A.weight / .lora_B.weight (or "
                    ".lora_embedding_A / _B), the adapter name removed"
                )
            sliced = handle.get_slice(key)
            shape = list(sliced.get_shape())
            if not module:
                others[key] = f"{shape} {sliced.get_dtype()}"
                continue
            if len(shape) != 2:
                raise ValueError(f"{owner}: {file}: {key} has shape {shape} ({len(shape)}-D); "
                                 "allowed: a 2-D factor")  # fmt: skip
            dtype = DTYPES.get(sliced.get_dtype())
            if dtype is None:
                raise ValueError(f"{owner}: {file}: {key} is {sliced.get_dtype()}; allowed: "
                                 f"floating point ({', '.join(DTYPES)})")  # fmt: skip
            if emb:
                embeddings.add(module)
            halves.setdefault(module, {})[half] = (key, shape, dtype)
    factors = {}
    for module, pair in halves.items():
        emb = module in embeddings
        for half in HALVES:
            if half not in pair:
                other = next(iter(pair))
                raise ValueError(
                    f"{owner}: {file}: {factor_key(module, other, embedding=emb)} has no "
                    f"partner {factor_key(module, half, embedding=emb)}"
                )
        (a_key, a_shape, a_dtype), (b_key, b_shape, b_dtype) = pair["lora_A"], pair["lora_B"]
        if a_shape[0] != b_shape[1]:
            raise ValueError(
                f"{owner}: {file}: {a_key} has rank {a_shape[0]} (shape "
                f"{a_shape}) but {b_key} has rank {b_shape[1]} (shape "
                f"{b_shape}); allowed: A [r, d_in], B [d_out, r]"
            )
        if a_dtype != b_dtype:
            raise ValueError(
                f"{owner}: {file}: the factors of {module!r} are {a_dtype} and "
                f"{b_dtype}; allowed: one dtype"
            )
        factors[module] = StoredPair(a_key, b_key, tuple(a_shape), tuple(b_shape), a_dtype)
    if not factors:
        raise ValueError(f"{owner}: {file} holds no LoRA factors")
    for module, m in magnitudes.items():
        key = f"{PREFIX}{module}{DORA}"
        if module not in factors or module in embeddings:
            what = "an embedding" if module in embeddings else "a module without a LoRA pair"
            raise ValueError(f"{owner}: {file}: {key} is the DoRA magnitude of {what}; allowed: "
                             "magnitudes of linear LoRA modules")  # fmt: skip
        d_out = factors[module].b_shape[0]
        if m.dim() != 1 or m.shape[0] != d_out or not m.is_floating_point():
            raise ValueError(f"{owner}: {file}: {key} has shape {list(m.shape)} {m.dtype}; "
                             f"allowed: [{d_out}] (d_out), floating point")  # fmt: skip
        if not all_finite(m):
            raise ValueError(f"{owner}: {file}: {key} has non-finite values (nan or inf)")
    with closing(PairReader(file)) as reader:
        for pair in factors.values():
            for key, t in zip((pair.a_key, pair.b_key), reader.read(pair), strict=True):
                if not all_finite(t):
                    raise ValueError(f"{owner}: {file}: {key} has non-finite values (nan or inf)")
    return FactorFile(file, dict(sorted(factors.items())), frozenset(embeddings), others,
                      magnitudes)  # fmt: skip


REOPEN_BYTES = 16 << 20
"""Bytes a :class:`PairReader` reads through one open handle before it reopens the file."""


class PairReader:
    """Reads LoRA pairs from one safetensors file, each into memory of its own.

    One handle serves many pairs (opening parses the whole header: about 0.5 ms for a 7B
    adapter's 448 keys), and is reopened after every :data:`REOPEN_BYTES` read: a handle's
    memory map keeps every page read resident until it is closed, so memory stays bounded
    whatever the file's size. The tensors of one handle are views of one buffer, so each pair
    is copied out: changing it in place changes no later read.
    """

    def __init__(self, file: Path) -> None:
        self.file = Path(file)
        self._handle: Any = None
        self._read = 0

    def read(self, pair: StoredPair) -> tuple[torch.Tensor, torch.Tensor]:
        """``(A [r, d_in], B [d_out, r])`` of ``pair``.

        Raises:
            ValueError: the file no longer holds the pair as its header was read (changed on
                disk since).
        """
        try:
            if self._handle is None or self._read > REOPEN_BYTES:
                self.close()
                self._handle = safetensors.safe_open(str(self.file), framework="pt")
                self._read = 0
            A = self._handle.get_tensor(pair.a_key).clone()
            B = self._handle.get_tensor(pair.b_key).clone()
        except (safetensors.SafetensorError, OSError, KeyError) as e:
            raise ValueError(f"PairReader: {self.file}: {pair.a_key}: {e} (changed on disk?)"
                             ) from None  # fmt: skip
        self._read += A.nbytes + B.nbytes
        read = (tuple(A.shape), tuple(B.shape), A.dtype, B.dtype)
        if read != (pair.a_shape, pair.b_shape, pair.dtype, pair.dtype):
            raise ValueError(f"PairReader: {self.file}: {pair.a_key} is no longer as read "
                             "(changed on disk since the adapter was loaded)")  # fmt: skip
        return A, B

    def close(self) -> None:
        """Close the handle (the next :meth:`read` reopens the file)."""
        if self._handle is not None:
            self._handle.__exit__(None, None, None)
            self._handle = None


def read_records(folder: Path, *, owner: str) -> dict[str, dict[str, Any]] | None:
    """Module → record fields from ``gaugelab_factor_records.json``, or None when absent.

    Raises:
        ValueError: the file is too large or deep (:func:`read_json`), not valid JSON or not
            of this format.
    """
    file = folder / RECORDS
    if not file.is_file():
        return None
    data = read_json(file, owner=owner, limit=RECORDS_LIMIT)
    if not isinstance(data, dict) or data.get("format") != RECORDS_FORMAT:
        raise ValueError(f"{owner}: {file} is not a {RECORDS_FORMAT} file")
    modules = data.get("modules")
    if not isinstance(modules, dict):
        raise ValueError(f"{owner}: {file}: 'modules' is not an object of records")
    return modules

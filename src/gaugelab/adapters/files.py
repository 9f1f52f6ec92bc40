"""PEFT adapter files on disk: ``adapter_model.safetensors`` + ``adapter_config.json``.

Tensors are read and written with ``safetensors`` only; a pickle checkpoint
(``adapter_model.bin``) is refused, never loaded. Keys follow ``save_pretrained``:
``base_model.model.<module path>.lora_A.weight`` and ``….lora_B.weight`` (PEFT strips the
adapter name, ``default``, from the keys it writes); an embedding's pair is
``….lora_embedding_A`` (``[r, num_embeddings]``) and ``….lora_embedding_B``
(``[embedding_dim, r]``). Whatever else a file holds — ``modules_to_save`` copies (a
classifier head), trained biases (``bias="lora_only"``: ``….base_layer.bias``) — is listed, not
analysed, and never refused for being there. The file is memory-mapped and read tensor by
tensor (``safetensors.safe_open``). gaugelab also writes
``gaugelab_factor_records.json``, the factor records of §0x07I; PEFT ignores the file.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import safetensors
import safetensors.torch
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
JSON_DEPTH_LIMIT = 64
"""The deepest nesting of objects and arrays read (PEFT's config nests three deep)."""


class FactorFile(NamedTuple):
    """What ``adapter_model.safetensors`` holds.

    Attributes:
        factors: module path → ``(A [r, d_in], B [d_out, r])`` (an embedding's pair as stored:
            ``A [r, num_embeddings]``, ``B [embedding_dim, r]``).
        embeddings: the modules whose pair is embedding LoRA.
        others: every other key → ``"[shape] dtype"`` (not read into memory).
        magnitudes: DoRA's magnitude vectors, module path → ``m [d_out]`` (read only when
            asked for, :func:`read_factors` ``dora=True``).
    """

    factors: dict[str, tuple[torch.Tensor, torch.Tensor]]
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
    """The LoRA pairs of ``adapter_model.safetensors`` and a list of everything else.

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
    halves: dict[str, dict[str, torch.Tensor]] = {}
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
            if not module:
                sliced = handle.get_slice(key)
                others[key] = f"{list(sliced.get_shape())} {sliced.get_dtype()}"
                continue
            t = handle.get_tensor(key)
            _check_factor(t, key, file, owner)
            if emb:
                embeddings.add(module)
            halves.setdefault(module, {})[half] = t
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
        A, B = pair["lora_A"], pair["lora_B"]
        if A.shape[0] != B.shape[1]:
            raise ValueError(
                f"{owner}: {file}: {factor_key(module, 'lora_A', embedding=emb)} has rank "
                f"{A.shape[0]} (shape {list(A.shape)}) but "
                f"{factor_key(module, 'lora_B', embedding=emb)} has rank {B.shape[1]} (shape "
                f"{list(B.shape)}); allowed: A [r, d_in], B [d_out, r]"
            )
        if A.dtype != B.dtype:
            raise ValueError(
                f"{owner}: {file}: the factors of {module!r} are {A.dtype} and "
                f"{B.dtype}; allowed: one dtype"
            )
        factors[module] = (A, B)
    if not factors:
        raise ValueError(f"{owner}: {file} holds no LoRA factors")
    for module, m in magnitudes.items():
        key = f"{PREFIX}{module}{DORA}"
        if module not in factors or module in embeddings:
            what = "an embedding" if module in embeddings else "a module without a LoRA pair"
            raise ValueError(f"{owner}: {file}: {key} is the DoRA magnitude of {what}; allowed: "
                             "magnitudes of linear LoRA modules")  # fmt: skip
        d_out = factors[module][1].shape[0]
        if m.dim() != 1 or m.shape[0] != d_out or not m.is_floating_point():
            raise ValueError(f"{owner}: {file}: {key} has shape {list(m.shape)} {m.dtype}; "
                             f"allowed: [{d_out}] (d_out), floating point")  # fmt: skip
        if not all_finite(m):
            raise ValueError(f"{owner}: {file}: {key} has non-finite values (nan or inf)")
    return FactorFile(dict(sorted(factors.items())), frozenset(embeddings), others, magnitudes)


def _check_factor(t: torch.Tensor, key: str, file: Path, owner: str) -> None:
    if t.dim() != 2:
        raise ValueError(
            f"{owner}: {file}: {key} has shape {list(t.shape)} ({t.dim()}-D); "
            "allowed: a 2-D factor"
        )
    if not t.is_floating_point():
        raise ValueError(f"{owner}: {file}: {key} is {t.dtype}; allowed: floating point")
    if not all_finite(t):
        raise ValueError(f"{owner}: {file}: {key} has non-finite values (nan or inf)")


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


def write_adapter(
    folder: str | os.PathLike,
    factors: Mapping[str, tuple[torch.Tensor, torch.Tensor]],
    config: Mapping[str, Any],
    records: Mapping[str, Mapping[str, Any]],
    *,
    overwrite: bool,
    owner: str,
    embeddings: frozenset[str] = frozenset(),
) -> Path:
    """Write the three files into ``folder`` (created if needed), each by an atomic rename.

    Raises:
        FileExistsError: ``folder`` already holds an adapter file and not ``overwrite``.
    """
    folder = Path(folder)
    existing = [n for n in (WEIGHTS, CONFIG, RECORDS, *PICKLES) if (folder / n).exists()]
    if existing and not overwrite:
        raise FileExistsError(
            f"{owner}: {folder} already holds {', '.join(existing)}; "
            "allowed: a new or empty directory, or overwrite=True"
        )
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {}
    for module, (A, B) in factors.items():
        emb = module in embeddings
        tensors[factor_key(module, "lora_A", embedding=emb)] = _own_storage(A)
        tensors[factor_key(module, "lora_B", embedding=emb)] = _own_storage(B)
    records_doc = {"format": RECORDS_FORMAT, "version": 1, "modules": dict(records)}
    texts = {
        CONFIG: json.dumps(config, indent=2, sort_keys=True, ensure_ascii=False) + "\n",
        RECORDS: json.dumps(records_doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n",
    }
    _atomic_write(folder / WEIGHTS, tensors)
    for name, text in texts.items():
        _atomic_write(folder / name, text.encode("utf-8"))
    return folder


def _own_storage(t: torch.Tensor) -> torch.Tensor:
    """``t`` on the CPU, contiguous and alone in its storage: copied only when it is a view
    into a larger storage (safetensors refuses tensors that share memory), so that a whole
    adapter is written without a second copy of its factors."""
    t = t.detach().cpu().contiguous()
    whole = t.storage_offset() == 0 and t.untyped_storage().nbytes() == t.numel() * t.element_size()
    return t if whole else t.clone()


def _atomic_write(path: Path, data: bytes | dict[str, torch.Tensor]) -> None:
    """Write ``data`` (bytes, or tensors as a safetensors file streamed from their memory,
    never serialised into one buffer) to a temporary sibling of ``path``, then rename it."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            if isinstance(data, bytes):
                f.write(data)
        if not isinstance(data, bytes):
            safetensors.torch.save_file(data, tmp, metadata={"format": "pt"})
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise

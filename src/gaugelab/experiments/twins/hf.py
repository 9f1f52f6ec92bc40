"""The twin protocol on a local Hugging Face model: its spec from a folder, its members, its
tokens.

:func:`hf_twin` reads a folder (or a ``config.json``), checks that its architecture has a
derived gauge (:mod:`gaugelab.models.hf_symmetry`) and that its vocabulary covers the text,
and returns the :class:`TwinSpec` of the stochastic variant (docs/protocols.md §6) on it: the
packaged tiny-shakespeare through the folder's own tokenizer, or as UTF-8 bytes when it has
none. :func:`hf_parts` builds what a run trains: the data, the members
(:func:`gaugelab.equivariance.hf_twins.make_hf_twins`) and their head invariants.

Source: singh2026lossbasis, §6 (twin protocol); docs/protocols.md §5, §6.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import torch

from gaugelab.equivariance.hf_twins import hf_invariants, make_hf_twins
from gaugelab.equivariance.twins import Invariants
from gaugelab.experiments.twins.data import TextData
from gaugelab.experiments.twins.spec import HFModelRef, TwinSpec
from gaugelab.models.hf import CausalLMLogits, HFModel, load_hf_model
from gaugelab.models.hf_symmetry import hf_attention
from gaugelab.tasks import TINY_SHAKESPEARE_SHA256, TokenText, tiny_shakespeare_bytes

__all__ = ["check_hf", "hf_parts", "hf_twin", "model_digest"]

BYTES = 256
_READ = (".json", ".safetensors", ".txt", ".model")  # config, weights, tokenizer files


def model_digest(path: str | os.PathLike[str]) -> str:
    """sha256 over the files a run reads: ``config.json`` alone for a config file; for a
    folder, every ``*.json``, ``*.safetensors``, ``*.txt`` and ``*.model`` file in it (name and
    content, in name order).

    Raises:
        FileNotFoundError: the path does not exist.
    """
    p = Path(path)
    files = [p] if p.is_file() else sorted(f for f in p.iterdir() if f.suffix in _READ)
    digest = hashlib.sha256()
    for f in files:
        digest.update(f.name.encode() + b"\0" + hashlib.sha256(f.read_bytes()).digest())
    return digest.hexdigest()


def _max_positions(config: Any) -> int | None:
    return getattr(config, "n_positions", None) or getattr(config, "max_position_embeddings", None)


def hf_twin(
    path: str | os.PathLike[str],
    *,
    steps: int = 300,
    block_size: int = 64,
    **overrides: Any,
) -> TwinSpec:
    """The stochastic twin run (docs/protocols.md §6) on a local Hugging Face model.

    Args:
        path: a model folder (safetensors weights, else a random init) or its ``config.json``
            (a random init, seeded by the spec's ``init_seed``).
        steps: training steps; checkpoints at the §6 marks up to ``steps``.
        block_size: tokens per window (at most the model's positions).
        **overrides: further :class:`TwinSpec` fields (``dtype``, ``batch_size`` …).

    Returns:
        A :class:`TwinSpec` with ``task='text'`` and ``hf`` set.

    Raises:
        FileNotFoundError: the path does not exist.
        ValueError: no config, pickled weights, an architecture without a derived gauge, a
            vocabulary under 256 without a tokenizer, or ``block_size`` beyond the positions.
        ImportError: ``transformers`` is missing (the message names ``gaugelab[hf]``).
    """
    loaded = load_hf_model(path, seed=0)
    hf_attention(loaded.model)  # raises for an architecture without a derived gauge
    config = loaded.config
    if loaded.tokenizer is None and config.vocab_size < BYTES:
        raise ValueError(
            f"model: vocab_size={config.vocab_size} and {str(loaded.source)!r} has no "
            f"tokenizer; allowed: a vocabulary of at least {BYTES} (the text's UTF-8 bytes) "
            "or a folder with its tokenizer"
        )
    positions = _max_positions(config)
    if positions is not None and block_size > positions:
        raise ValueError(f"block_size={block_size}; allowed: at most the model's {positions} "
                         "positions")  # fmt: skip
    source = Path(path).expanduser().resolve()
    ref = HFModelRef(
        path=str(source),
        model_type=loaded.model_type,
        sha256=model_digest(source),
        weights=loaded.weights,
        tokens="bytes" if loaded.tokenizer is None else "tokenizer",
        block_size=block_size,
    )
    checkpoints = tuple(s for s in (0, 1, 10, 50, 100, 200, 300, 500, 1000) if s <= steps)
    return TwinSpec(task="text", hf=ref, text_sha256=TINY_SHAKESPEARE_SHA256, steps=steps,
                    checkpoints=checkpoints, **overrides)  # fmt: skip


def check_hf(ref: HFModelRef) -> None:
    """Raise unless the model's files are still the ones the spec recorded.

    Raises:
        ValueError: the path is gone or a file changed.
    """
    try:
        digest = model_digest(ref.path)
    except FileNotFoundError:
        raise ValueError(f"model: {ref.path!r} does not exist any more") from None
    if digest != ref.sha256:
        raise ValueError(
            f"model: {ref.path!r} has digest {digest[:12]}…, the spec expects "
            f"{ref.sha256[:12]}…: its files changed"
        )


def _tokens(loaded: HFModel, block_size: int) -> TokenText:
    raw = tiny_shakespeare_bytes()
    if loaded.tokenizer is None:
        ids = torch.frombuffer(bytearray(raw), dtype=torch.uint8).long()
        name = "tiny-shakespeare as bytes"
    else:
        ids = torch.tensor(loaded.tokenizer(raw.decode("utf-8"), verbose=False)["input_ids"])
        name = f"tiny-shakespeare through {loaded.source.name}'s tokenizer"
    return TokenText(ids, block_size, loaded.config.vocab_size, name)


def hf_parts(
    spec: TwinSpec,
) -> tuple[TextData, list[CausalLMLogits], list[str], Invariants]:
    """What a run of ``spec`` (``hf`` set) trains: the data, the members (base first), their
    names, and their head invariants.

    Raises:
        ValueError: the model's files changed since the spec was made, or its tokens fall
            outside its vocabulary.
    """
    ref = spec.hf
    if ref is None:
        raise ValueError("hf_parts: spec.hf is None; allowed: a spec made by hf_twin")
    check_hf(ref)
    loaded = load_hf_model(ref.path, dtype=getattr(torch, spec.dtype), seed=spec.init_seed,
                           random_init=ref.weights == "random")  # fmt: skip
    data = TextData(spec, text=_tokens(loaded, ref.block_size))
    layout = hf_attention(loaded.model)
    members, names = make_hf_twins(CausalLMLogits(loaded.model), layout, spec.twins,
                                   **spec.twin_draw())  # fmt: skip
    return data, members, names, hf_invariants(layout)

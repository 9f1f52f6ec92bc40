"""Hugging Face model folders: a local checkpoint or ``config.json``, opened without a download
and without unpickling.

The one place gaugelab opens a user's Hugging Face model (``transformers``, the optional extra
``gaugelab[hf]``). A *folder* holds ``config.json`` and, optionally, safetensors weights
(``model.safetensors`` or a sharded ``model.safetensors.index.json``) and tokenizer files; a
*config file* is a ``config.json`` alone. Without weights the model is a random initialisation
from the config, seeded. PyTorch pickles (``pytorch_model.bin``) are refused: gaugelab never
unpickles a user's file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from gaugelab.lazy import LazyModule

__all__ = [
    "HF_EXTRA",
    "CausalLMLogits",
    "HFModel",
    "load_hf_config",
    "load_hf_model",
    "require_transformers",
]

transformers = LazyModule("transformers")

HF_EXTRA = "pip install 'gaugelab[hf]'"
"""How to install what this module needs (``transformers`` and ``peft``)."""

_WEIGHTS = ("model.safetensors", "model.safetensors.index.json")
_PICKLES = ("pytorch_model.bin", "pytorch_model.bin.index.json")
_TOKENIZER = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")
_MAX_CONFIG_BYTES = 1 << 20
Head = Literal["causal-lm", "base"]


@dataclass(frozen=True)
class HFModel:
    """A Hugging Face model opened from a local path.

    Attributes:
        model: the ``transformers`` module, in evaluation mode, on the CPU, in the dtype asked for.
        config: its ``PretrainedConfig``.
        model_type: the config's ``model_type`` (``"gpt2"``, ``"gpt_neox"``, ``"llama"`` …).
        tokenizer: the folder's own tokenizer, or ``None`` when the folder has none (the caller
            then feeds bytes).
        source: the folder the model came from.
        weights: ``"checkpoint"`` (the folder's safetensors) or ``"random"`` (an init from the
            config, seeded).
    """

    model: torch.nn.Module
    config: Any
    model_type: str
    tokenizer: Any | None
    source: Path
    weights: Literal["checkpoint", "random"]


class CausalLMLogits(torch.nn.Module):
    """A causal LM as a module from token ids to logits, for :class:`gaugelab.models.Ensemble`.

    ``forward(tokens [B, T]) → logits [B, T, vocab]`` (no cache, no attention mask: every
    window is full). ``vmap_compatible = False``: the ensemble evaluates the members one by
    one with ``functional_call`` (``transformers``' mask and position code is not written for
    ``vmap``). The wrapped model stays in evaluation mode (no dropout).

    Args:
        model: a ``transformers`` causal LM (``HFModel.model``).
    """

    vmap_compatible = False

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model.eval()

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits ``[B, T, vocab]`` of ``tokens`` ``[B, T]`` (long)."""
        return self.model(input_ids=tokens, use_cache=False).logits


def require_transformers() -> None:
    """Raise a one-line ``ImportError`` naming the extra when ``transformers`` is missing.

    Raises:
        ImportError: ``transformers`` is not installed.
    """
    try:
        transformers.__version__  # noqa: B018 (the import happens on first read)
    except ImportError as exc:
        raise ImportError(f"Hugging Face model folders need transformers: {HF_EXTRA}") from exc


def _folder(path: str | Path) -> Path:
    p = Path(path).expanduser()
    if not p.exists():
        raise FileNotFoundError(
            f"model: {str(path)!r} does not exist; allowed: a local Hugging "
            "Face model folder or its config.json (nothing is downloaded)"
        )
    folder = p.parent if p.is_file() else p
    if p.is_file() and p.name != "config.json":
        raise ValueError(
            f"model: {str(path)!r} is a file but not config.json; allowed: a model "
            "folder or its config.json"
        )
    if not (folder / "config.json").is_file():
        raise ValueError(
            f"model: {str(folder)!r} has no config.json; allowed: a Hugging Face "
            "model folder (config.json, optional safetensors weights)"
        )
    return folder


def load_hf_config(path: str | Path) -> Any:
    """The ``PretrainedConfig`` of a local folder or ``config.json``.

    Args:
        path: a model folder, or the ``config.json`` inside it.

    Returns:
        The config, read with ``AutoConfig`` from the folder (no download).

    Raises:
        FileNotFoundError: the path does not exist.
        ValueError: no ``config.json``, one over 1 MiB, or one ``transformers`` cannot read.
        ImportError: ``transformers`` is not installed.
    """
    folder = _folder(path)
    config_file = folder / "config.json"
    if config_file.stat().st_size > _MAX_CONFIG_BYTES:
        raise ValueError(f"model: {str(config_file)!r} is over 1 MiB; refused")
    try:
        raw = json.loads(config_file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise ValueError(f"model: {str(config_file)!r} is not valid JSON ({exc})") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("model_type"), str):
        raise ValueError(
            f"model: {str(config_file)!r} names no model_type; allowed: a config "
            "written by transformers' save_pretrained"
        )
    require_transformers()
    try:
        return transformers.AutoConfig.from_pretrained(str(folder), local_files_only=True)
    except (ValueError, KeyError, OSError) as exc:
        raise ValueError(f"model: transformers cannot read {str(config_file)!r}: {exc}") from None


def _tokenizer(folder: Path) -> Any | None:
    if not any((folder / name).is_file() for name in _TOKENIZER):
        return None
    return transformers.AutoTokenizer.from_pretrained(str(folder), local_files_only=True)


def load_hf_model(
    path: str | Path,
    *,
    head: Head = "causal-lm",
    dtype: torch.dtype = torch.float32,
    seed: int = 0,
    random_init: bool = False,
) -> HFModel:
    """Open a local Hugging Face model: its safetensors weights, or a seeded random init.

    Args:
        path: a model folder, or its ``config.json`` (then the weights are a random init).
        head: ``"causal-lm"`` (``AutoModelForCausalLM``) or ``"base"`` (``AutoModel``, the
            backbone PEFT adapts for encoders such as BERT).
        dtype: the parameters' dtype (``torch.float32`` or ``torch.float64``; a checkpoint is cast).
        seed: the seed of a random init (ignored when weights are loaded).
        random_init: ignore the folder's weights and initialise from the config.

    Returns:
        The model in evaluation mode, with its config, tokenizer and where its weights came from.

    Raises:
        FileNotFoundError: the path does not exist.
        ValueError: no ``config.json``; weights only as a PyTorch pickle (refused: convert them to
            safetensors, or pass ``random_init=True``); an unknown ``head``.
        ImportError: ``transformers`` is not installed.
    """
    if head not in ("causal-lm", "base"):
        raise ValueError(f"head: {head!r}; allowed: 'causal-lm', 'base'")
    config = load_hf_config(path)
    folder = _folder(path)
    auto = transformers.AutoModelForCausalLM if head == "causal-lm" else transformers.AutoModel
    has_weights = Path(path).is_dir() and any((folder / w).is_file() for w in _WEIGHTS)
    if Path(path).is_dir() and not has_weights and not random_init:
        pickled = [w for w in _PICKLES if (folder / w).is_file()]
        if pickled:
            raise ValueError(
                f"model: {str(folder)!r} holds its weights as a PyTorch pickle ({pickled[0]}); "
                "gaugelab never unpickles: save them as safetensors, or use a random init"
            )
    if has_weights and not random_init:
        model = auto.from_pretrained(
            str(folder), local_files_only=True, use_safetensors=True, dtype=dtype
        )
        weights: Literal["checkpoint", "random"] = "checkpoint"
    else:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = auto.from_config(config, dtype=dtype)
        weights = "random"
    model.eval()
    return HFModel(model, config, config.model_type, _tokenizer(folder), folder, weights)

"""The evidence ladder of seed 003 §0x04M on the user's own model: a PEFT adapter, its Hugging
Face base (a local folder) and a text or JSONL file.

The base is opened with :func:`gaugelab.models.hf.load_hf_model` (safetensors only, nothing
downloaded), as the causal LM a ``CAUSAL_LM`` adapter was made on, else as the backbone
(``AutoModel``). Every adapted module must be an ``nn.Linear`` or GPT-2's ``Conv1D`` (weight
``[d_in, d_out]``) of the update's shape. The model holds ``W₀ + s·B A`` in every adapted
module (the fine-tuned model); the data, tokenised by the folder's tokenizer (UTF-8 bytes
without one), is cut into windows (:func:`gaugelab.tasks.token_windows`) under a budget of
input positions, and forward hooks stream each module's inputs into its Gram matrix
(:func:`~gaugelab.experiments.lora.ladder.capture_moments`): one batch of activations is held
at a time, and ``n²`` float64 numbers per module of input width ``n``. The ladder
(:func:`~gaugelab.experiments.lora.ladder.ladder`) then gives, per module and rank, the weight
residuals, the input support and the output residuals of the weight-SVD and output-weighted
truncations and — for a causal LM — the next-token loss on the same windows with that module's
update replaced, and with every module's replaced at once. There is no retention domain.

A base without weights (a ``config.json``, or a folder without safetensors) is refused unless
asked for: the adapter was trained on particular weights, and a random init's activations say
nothing about the inputs it sees.

Source: seed 003 §0x04E–0x04H (output residual, output-weighted truncation), §0x04M (the ladder).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from gaugelab.adapters import Adapter
from gaugelab.experiments.lora.ladder import (
    JointRow,
    LadderRow,
    Replacer,
    capture_moments,
    ladder,
    mean_loss,
)
from gaugelab.lazy import LazyModule
from gaugelab.models.hf import load_hf_model
from gaugelab.tasks.token_windows import JSONL_FIELD, read_documents, token_windows, utf8_bytes

__all__ = ["DTYPES", "HEADS", "HFEvidence", "HFLadder", "hf_ladder"]

pytorch_utils = LazyModule("transformers.pytorch_utils")

HEADS = ("auto", "causal-lm", "base")
"""``auto``: ``causal-lm`` for an adapter whose ``task_type`` is ``CAUSAL_LM``, else ``base``."""
DTYPES = {"float32": torch.float32, "float64": torch.float64}


@dataclass(frozen=True)
class HFEvidence:
    """Where the ladder's base model and data come from, and how much data it reads.

    Attributes:
        base: a local Hugging Face model folder (``config.json`` + safetensors weights).
        data: a UTF-8 text file, or a ``.jsonl`` file with one document per line in ``field``.
        tokens: the budget of input positions (``N``, per module); the windows hold
            ``tokens // window`` windows at most. The input support rank is at most ``N``.
        window: positions per window (at most the model's context).
        field: the JSONL field read as a document.
        head: one of :data:`HEADS`.
        dtype: the model's dtype, ``float32`` or ``float64`` (the Gram matrices are float64).
        random_init: run on a random init from the config when the base has no weights.
        batch: windows per forward pass.
        end_to_end: compute the losses (a causal LM only): ``2·len(ranks)`` passes over the
            windows per module, as many for the joint table, and 2 for the references.

    Raises:
        ValueError: a value outside the allowed ones (naming the option).
    """

    base: Path
    data: Path
    tokens: int = 4096
    window: int = 128
    field: str = JSONL_FIELD
    head: str = "auto"
    dtype: str = "float32"
    random_init: bool = False
    batch: int = 8
    end_to_end: bool = True

    def __post_init__(self) -> None:
        for name in ("tokens", "window", "batch"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"--{name} {value!r}; allowed: an integer >= 1")
        if self.tokens < self.window:
            raise ValueError(f"--tokens {self.tokens}; allowed: at least --window ({self.window})")
        if self.head not in HEADS:
            raise ValueError(f"--head {self.head!r}; allowed: {', '.join(HEADS)}")
        if self.dtype not in DTYPES:
            raise ValueError(f"--dtype {self.dtype!r}; allowed: {', '.join(DTYPES)}")
        if not self.field:
            raise ValueError("--field ''; allowed: a JSONL field name")
        object.__setattr__(self, "base", Path(self.base))
        object.__setattr__(self, "data", Path(self.data))


@dataclass
class HFLadder:
    """What :func:`hf_ladder` measured: the reference losses (``target``: the adapted model,
    ``base_target``: the base; absent without a language-model head), the per-module rows, the
    joint rows, the windows read (``n_windows × window`` positions) and what was left out."""

    reference: dict[str, float]
    rows: list[LadderRow]
    joint: list[JointRow]
    n_windows: int
    window: int
    head: str
    notes: list[str] = field(default_factory=list)


def _head(adapter: Adapter, head: str) -> str:
    if head != "auto":
        return head
    return "causal-lm" if adapter.config.extra.get("task_type") == "CAUSAL_LM" else "base"


def _check_module(model: nn.Module, module: str, shape: tuple[int, int], where: str) -> bool:
    """Whether ``module``'s weight is stored transposed (``Conv1D``); raise on a mismatch."""
    try:
        layer = model.get_submodule(module)
    except AttributeError:
        raise ValueError(f"--base: the adapter's module {module!r} is not a module of {where}; "
                         "allowed: an adapter of that base (check --head)") from None  # fmt: skip
    transposed = isinstance(layer, pytorch_utils.Conv1D)
    if not (transposed or isinstance(layer, nn.Linear)):
        raise ValueError(f"--base: {module!r} is a {type(layer).__name__} in {where}; allowed: "
                         "nn.Linear or Conv1D")  # fmt: skip
    weight = tuple(layer.weight.shape)
    d_out, d_in = weight[::-1] if transposed else weight
    if (d_out, d_in) != shape:
        raise ValueError(f"--base: module {module!r} is {shape[0]}×{shape[1]} (d_out×d_in) in "
                         f"the adapter but {d_out}×{d_in} in {where}; allowed: an adapter of "
                         "that base")  # fmt: skip
    return transposed


def hf_ladder(adapter: Adapter, evidence: HFEvidence, ranks: tuple[int, ...],
              computed_in: torch.dtype) -> HFLadder:  # fmt: skip
    """The evidence ladder of ``adapter`` on its Hugging Face base and the user's data.

    Args:
        adapter: the PEFT adapter (its LoRA pairs; embedding pairs and other tensors are left
            out of the model and listed in the notes).
        evidence: base, data and budget.
        ranks: the truncation ranks.
        computed_in: the dtype the factors were stored in (the tolerances).

    Returns:
        The :class:`HFLadder`.

    Raises:
        FileNotFoundError: the base or the data does not exist.
        ValueError: a base without weights (unless ``random_init``), a module the base does
            not have or of another shape, token ids beyond the base's vocabulary, data too
            short for one window; each one line naming the option.
        ImportError: ``transformers`` is not installed.
    """
    if not evidence.data.is_file():
        raise FileNotFoundError(f"--data: {str(evidence.data)!r} is not a file; allowed: a "
                                "UTF-8 text file or a .jsonl file")  # fmt: skip
    head = _head(adapter, evidence.head)
    hf = load_hf_model(evidence.base, head=head, dtype=DTYPES[evidence.dtype],
                       random_init=False)  # fmt: skip
    where = f"{evidence.base} ({hf.model_type}, head {head})"
    if hf.weights == "random" and not evidence.random_init:
        raise ValueError(f"--base: {str(evidence.base)!r} holds no safetensors weights; the "
                         "ladder on a random init says nothing about the adapter's base (pass "
                         "--random-base to run it anyway)")  # fmt: skip
    modules = [m for m in adapter.modules if m not in adapter.embeddings]
    notes = []
    if adapter.embeddings:
        notes.append(f"evidence ladder: embedding LoRA ({', '.join(sorted(adapter.embeddings))}) "
                     "left out: not applied to the model, no linear inputs")  # fmt: skip
    if adapter.others:
        notes.append(f"evidence ladder: {len(adapter.others)} other trained tensor(s) of the "
                     "adapter not applied to the model (modules_to_save, biases)")  # fmt: skip
    if not modules:
        raise ValueError("--base: the adapter has embedding LoRA only; allowed: an adapter "
                         "with a LoRA pair on a linear module")  # fmt: skip
    transposed = frozenset(
        m for m in modules
        if _check_module(hf.model, m, (adapter.records[m].d_out, adapter.records[m].d_in), where)
    )  # fmt: skip
    context = getattr(hf.config, "n_positions", None) or getattr(
        hf.config, "max_position_embeddings", None)  # fmt: skip
    window = min(evidence.window, context) if context else evidence.window
    windows = _windows(hf, evidence, window)
    batches = [(w[:, :-1], w[:, 1:]) for w in torch.split(windows, evidence.batch)]
    deltas = {}
    for m in modules:
        one = adapter.modules[m]  # read once
        deltas[m] = (one.B.double() * one.scale, one.A.double())  # (s·B, A): factor space
    lm = head == "causal-lm" and evidence.end_to_end
    reference = {"base_target": mean_loss(hf.model, batches)} if lm else {}
    replacer = Replacer(hf.model, deltas, transposed)  # W₀ + ΔW from here on
    if lm:
        reference["target"] = mean_loss(hf.model, batches)
    elif not evidence.end_to_end:
        notes.append("evidence ladder: end-to-end losses not asked for (--no-end-to-end)")
    else:
        notes.append(f"evidence ladder: end-to-end losses need a language-model head; the base "
                     f"was opened as the backbone (head {head})")  # fmt: skip
    inputs = capture_moments(hf.model, modules, batches)
    rows, joint = ladder(replacer, inputs, batches if lm else None, None, ranks, computed_in)
    return HFLadder(reference, rows, joint, windows.shape[0], window, head, notes)


def _windows(hf, evidence: HFEvidence, window: int) -> torch.Tensor:
    vocab = hf.model.get_input_embeddings().num_embeddings
    if hf.tokenizer is None:
        if vocab < 256:
            raise ValueError(f"--base: {str(evidence.base)!r} has no tokenizer and a vocabulary "
                             f"of {vocab} < 256: its data cannot be fed as bytes")  # fmt: skip
        encode, eos = utf8_bytes, None
    else:
        tokenizer = hf.tokenizer

        def encode(text: str) -> list[int]:
            return tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]

        eos = tokenizer.eos_token_id
    docs = read_documents(evidence.data, field=evidence.field)
    try:
        windows = token_windows(docs, encode, tokens=evidence.tokens, window=window, eos=eos)
    except ValueError as exc:
        message = str(exc)
        if message.startswith("data: "):  # the file's own complaint names it
            raise ValueError("--" + message) from None
        raise ValueError(f"--data: {os.fspath(evidence.data)!r}: {message}") from None
    if int(windows.max()) >= vocab:
        raise ValueError(f"--data: token id {int(windows.max())} is beyond the base's "
                         f"vocabulary of {vocab}")  # fmt: skip
    return windows

"""What an adapted module is, read from its path: layer, family, role — for the model families
PEFT adapts.

One reader for every view that groups or orders modules (spectrum panels by role, the by-layer
energy table, the attention/MLP split): gaugelab's own model (``blocks.N.attn.q_proj``,
``blocks.N.mlp.fc_in``), GPT-2 (``transformer.h.N.attn.c_attn``, ``attn.c_proj``, ``mlp.c_fc``,
``mlp.c_proj``), GPT-NeoX (``attention.query_key_value``, ``attention.dense``,
``mlp.dense_h_to_4h``, ``mlp.dense_4h_to_h``), Llama / Mistral / Qwen (``self_attn.q_proj`` …
``o_proj``, ``mlp.gate_proj``, ``up_proj``, ``down_proj``), BERT / RoBERTa and ViT
(``attention.self.query`` …, ``attention.output.dense``, ``intermediate.dense``,
``output.dense``), T5 (``SelfAttention.q`` … ``o``, ``EncDecAttention``, ``DenseReluDense.wi``,
``wi_0``, ``wi_1``, ``wo``; an ``encoder`` and a ``decoder`` stack). The same leaf can mean two
things (GPT-2's ``c_proj`` is the attention output under ``attn`` and the MLP's down projection
under ``mlp``; BERT's ``output.dense`` is the attention output under ``attention``): the role
is read from the leaf and its parents together.

Source: the module names of the Hugging Face ``transformers`` implementations of these families,
as PEFT's ``save_pretrained`` writes them (``base_model.model.`` prefix removed).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["FAMILIES", "ROLES", "ModuleName", "module_order", "parse_module_name", "short_names"]

FAMILIES: tuple[str, ...] = ("embedding", "attention", "mlp", "other")
"""The families, in the order a block computes them (``other``: anything else, e.g. a head)."""
ROLES: tuple[str, ...] = ("embedding", "q", "k", "v", "qkv", "o", "gate", "up", "down")
"""The roles, in block order: query, key, value, a fused ``qkv``, the attention output; the
MLP's gate, up and down projections."""

_LAYER = re.compile(r"(?:^|\.)(?:layers|layer|h|blocks|block)\.(\d+)(?:\.|$)")
_STACK = re.compile(r"(?:^|\.)(encoder|decoder)(?:\.|$)")
_ATTENTION_PARENTS = {"attn", "attention", "self_attn", "selfattention", "encdecattention",
                      "crossattention", "self", "mixer"}  # fmt: skip
_MLP_PARENTS = {"mlp", "densereludense", "feed_forward", "ffn", "intermediate", "block_sparse_moe"}
_LEAVES = {  # leaf → (family, role), where the leaf alone says it
    "q_proj": ("attention", "q"), "k_proj": ("attention", "k"), "v_proj": ("attention", "v"),
    "o_proj": ("attention", "o"), "out_proj": ("attention", "o"), "query": ("attention", "q"),
    "key": ("attention", "k"), "value": ("attention", "v"), "c_attn": ("attention", "qkv"),
    "query_key_value": ("attention", "qkv"), "qkv_proj": ("attention", "qkv"),
    "Wqkv": ("attention", "qkv"), "gate_proj": ("mlp", "gate"), "up_proj": ("mlp", "up"),
    "down_proj": ("mlp", "down"), "fc1": ("mlp", "up"), "fc2": ("mlp", "down"),
    "c_fc": ("mlp", "up"), "fc_in": ("mlp", "up"), "fc_gate": ("mlp", "gate"),
    "fc_out": ("mlp", "down"), "dense_h_to_4h": ("mlp", "up"), "dense_4h_to_h": ("mlp", "down"),
    "wi": ("mlp", "up"), "wi_0": ("mlp", "gate"), "wi_1": ("mlp", "up"), "wo": ("mlp", "down"),
    "gate_up_proj": ("mlp", "up"), "w1": ("mlp", "gate"), "w3": ("mlp", "up"),
    "w2": ("mlp", "down"), "embed_tokens": ("embedding", "embedding"),
    "wte": ("embedding", "embedding"), "word_embeddings": ("embedding", "embedding"),
    "embed_in": ("embedding", "embedding"), "shared": ("embedding", "embedding"),
    "embed": ("embedding", "embedding"),
}  # fmt: skip
_T5_ATTENTION = frozenset("qkvo")  # T5's SelfAttention / EncDecAttention leaves: the role


@dataclass(frozen=True)
class ModuleName:
    """An adapted module's place in its model.

    Attributes:
        path: the module path as given.
        layer: the block index (``None`` outside the blocks, e.g. an embedding).
        family: one of :data:`FAMILIES`.
        role: one of :data:`ROLES`, or the leaf name for ``other``.
        stack: ``"encoder"`` or ``"decoder"`` for an encoder–decoder model, else ``None``.
        cross: the module belongs to a cross-attention (T5's ``EncDecAttention``).
    """

    path: str
    layer: int | None
    family: str
    role: str
    stack: str | None = None
    cross: bool = False

    @property
    def key(self) -> str:
        """What modules of the same kind share across layers, e.g. ``"attention.o"``,
        ``"mlp.down"``, ``"decoder.cross-attention.q"`` (a panel, a table column)."""
        family = "cross-attention" if self.cross else self.family
        return ".".join(p for p in (self.stack, family, self.role) if p)


def parse_module_name(path: str) -> ModuleName:
    """Read a module path (see the module docstring for the families understood).

    Args:
        path: a module path, with or without PEFT's ``base_model.model.`` prefix.

    Returns:
        The :class:`ModuleName`; a name of no known family reads ``family="other"``,
        ``role`` its leaf.
    """
    parts = path.split(".")
    leaf = parts[-1]
    parents = [p.lower() for p in parts[:-1]]
    layer_match = _LAYER.search(path)
    stack_match = _STACK.search(path)
    layer = int(layer_match[1]) if layer_match else None
    stack = stack_match[1] if stack_match else None
    cross = any(p in ("encdecattention", "crossattention", "encoder_attn") for p in parents)
    parent = parents[-1] if parents else ""
    in_attention = any(p in _ATTENTION_PARENTS for p in parents[-2:])
    in_mlp = any(p in _MLP_PARENTS for p in parents[-2:])
    if leaf == "c_proj":  # GPT-2: the attention output under attn, the down projection under mlp
        family, role = ("mlp", "down") if parent == "mlp" else ("attention", "o")
    elif leaf == "dense":  # NeoX attention.dense, BERT attention.output.dense / output.dense
        if in_attention:  # parents[-2:] holds BERT's "attention" of attention.output.dense
            family, role = "attention", "o"
        elif parent == "intermediate":
            family, role = "mlp", "up"
        elif parent == "output":
            family, role = "mlp", "down"
        else:
            family, role = "other", leaf
    elif leaf in _T5_ATTENTION and in_attention:
        family, role = "attention", leaf
    elif leaf in _LEAVES:
        family, role = _LEAVES[leaf]
    elif in_mlp:
        family, role = "mlp", leaf
    else:
        family, role = "other", leaf
    return ModuleName(path, layer, family, role, stack, cross and family == "attention")


def module_order(path: str) -> tuple[int, int, int, int, int, str]:
    """A sort key: stack (encoder first), layer (modules outside the blocks first), family
    and role in block order, then the path."""
    name = parse_module_name(path)
    stack = {"encoder": 0, "decoder": 1}.get(name.stack or "", 0)
    family = FAMILIES.index(name.family)
    role = ROLES.index(name.role) if name.role in ROLES else len(ROLES)
    return (stack, -1 if name.layer is None else name.layer, int(name.cross), family, role,
            path)  # fmt: skip


def short_names(paths: list[str]) -> dict[str, str]:
    """Path → the shortest dotted suffix that tells it apart from the other modules of its
    layer (``q_proj``; ``attn.c_proj`` and ``mlp.c_proj`` where one GPT-2 block has both): a
    column or legend label that means the same module in every layer.

    Example: ``short_names(["h.0.attn.c_proj", "h.0.mlp.c_proj", "h.0.mlp.c_fc"])`` →
    ``attn.c_proj``, ``mlp.c_proj``, ``c_fc``.
    """
    relative = {}  # path → its parts after the block index (all of them outside the blocks)
    for path in paths:
        match = _LAYER.search(path)
        rest = path[match.end():] if match and match.end() < len(path) else path
        relative[path] = rest.split(".")
    layer = {path: parse_module_name(path).layer for path in paths}
    out = {}
    for path, own in relative.items():
        peers = [relative[q] for q in paths if layer[q] == layer[path]]
        for k in range(1, len(own) + 1):
            label = ".".join(own[-k:])
            if sum(".".join(p[-k:]) == label for p in peers) == 1:
                break
        out[path] = label
    return out

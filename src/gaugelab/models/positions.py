"""Positional information of the Transformer: sinusoidal embeddings, ALiBi slopes and biases,
and rotary embeddings (RoPE) with the pairing convention their gauge commutes with."""

from __future__ import annotations

import math

import torch
from torch import nn

from gaugelab.models.config import TransformerConfig


def sinusoidal_positions(n_ctx: int, d: int) -> torch.Tensor:
    """``[n_ctx, d]`` table ``sin(t/10000^{2i/d})`` (even dims), ``cos`` (odd dims)."""
    t = torch.arange(n_ctx, dtype=torch.float64).unsqueeze(1)  # [T, 1]
    freq = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)  # [ceil(d/2)]
    table = torch.zeros(n_ctx, d, dtype=torch.float64)
    table[:, 0::2] = torch.sin(t * freq)
    table[:, 1::2] = torch.cos(t * freq)[:, : d // 2]
    return table


def alibi_slopes(n_heads: int) -> torch.Tensor:
    """ALiBi head slopes: ``2^{−8h/n}`` for a power of two ``n``, interleaved otherwise.

    Source: press2021train, §3.
    """

    def power_of_two(n: int) -> list[float]:
        return [2.0 ** (-8.0 * (i + 1) / n) for i in range(n)]

    if math.log2(n_heads).is_integer():
        return torch.tensor(power_of_two(n_heads), dtype=torch.float64)
    closest = 2 ** math.floor(math.log2(n_heads))
    extra = alibi_slopes(2 * closest)[0::2][: n_heads - closest]
    return torch.cat([torch.tensor(power_of_two(closest), dtype=torch.float64), extra])


def alibi_bias(slopes: torch.Tensor, T: int, causal: bool) -> torch.Tensor:
    """``[H, T, T]`` score bias ``−m_h (t − s)`` (``−m_h |t − s|`` without the causal mask)."""
    t = torch.arange(T, device=slopes.device)
    offset = (t.unsqueeze(1) - t.unsqueeze(0)).to(slopes.dtype)  # [T, T], t − s
    bias = -slopes.view(-1, 1, 1) * offset.abs()
    if causal:
        bias = bias.masked_fill(offset < 0, float("-inf"))
    return bias


class Rotary(nn.Module):
    """Rotary position embedding on queries/keys ``[..., T, D]``.

    Plane ``i`` (``(i, i + D/2)`` for ``halves``, ``(2i, 2i+1)`` for ``adjacent``) turns by
    ``t·θ_i`` with ``θ_i = base^{−2i/D}``. Source: su2021roformer, §3.2, eqs. (14)–(16).
    """

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        half = config.d_head // 2
        # float64 frequencies held outside the buffers, so a dtype cast never rounds the angles
        self.theta = config.rope_base ** (
            -torch.arange(half, dtype=torch.float64) * 2 / config.d_head
        )
        self.pairing = config.rope_pairing

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        T = x.shape[-2]
        angle = torch.arange(T, dtype=torch.float64).unsqueeze(1) * self.theta  # [T, D/2]
        cos, sin = torch.cos(angle).to(x), torch.sin(angle).to(x)
        if self.pairing == "halves":
            x1, x2 = x.chunk(2, dim=-1)
            return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)

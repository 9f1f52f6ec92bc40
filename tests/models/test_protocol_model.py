"""The PROTOCOLS §5 twin model equals a plain PyTorch model written from the protocol's text.

The reference builds its model "after seeding 42" from torch's default layers; our
``Transformer(twin_model_config(), seed=42)`` must draw the same parameters (layer order and
each layer's [out, in] layout) and compute the same logits. The twin protocol's chaos test is
sensitive to the exact draw, so this is checked parameter by parameter.
"""

import torch
import torch.nn.functional as F
from torch import nn

from gaugelab.experiments.twins.run import twin_model_config
from gaugelab.models import Transformer
from gaugelab.tasks import ModularArithmetic


class PlainBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.g1, self.g2 = nn.Parameter(torch.ones(64)), nn.Parameter(torch.ones(64))
        self.q, self.k, self.v, self.o = (nn.Linear(64, 64, bias=False) for _ in range(4))
        self.fc1, self.fc2 = nn.Linear(64, 256, bias=False), nn.Linear(256, 64, bias=False)


def rms(x, g):
    return x / x.norm(dim=-1, keepdim=True) * 64**0.5 * g  # x/‖x‖·√d·g


class PlainModel(nn.Module):
    """PROTOCOLS §5 in plain torch: embedding 48×64, positions 0.02·randn(3, 64), 2 pre-RMSNorm
    blocks (4 heads × 16, scale 16^−½, no mask, SiLU MLP 256, no biases), final RMSNorm, head
    64 → 47 read at the last position."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(42)
        self.emb = nn.Embedding(48, 64)
        self.pos = nn.Parameter(0.02 * torch.randn(3, 64))
        self.blocks = nn.ModuleList(PlainBlock() for _ in range(2))
        self.gf = nn.Parameter(torch.ones(64))
        self.head = nn.Linear(64, 47, bias=False)

    def forward(self, x):
        h = self.emb(x) + self.pos
        B = x.shape[0]
        for b in self.blocks:
            a = rms(h, b.g1)
            q, k, v = (f(a).view(B, 3, 4, 16).transpose(1, 2) for f in (b.q, b.k, b.v))
            w = torch.softmax(q @ k.transpose(-1, -2) / 4.0, dim=-1)
            h = h + b.o((w @ v).transpose(1, 2).reshape(B, 3, 64))
            h = h + b.fc2(F.silu(b.fc1(rms(h, b.g2))))
        return self.head(rms(h, self.gf))[:, -1]


def test_twin_model_draws_the_plain_models_parameters_at_seed_42():
    ours = Transformer(twin_model_config(), seed=42)
    with torch.random.fork_rng(devices=[]):
        plain = PlainModel()
    assert torch.equal(ours.embed.weight, plain.emb.weight)
    assert torch.equal(ours.W_pos, plain.pos)
    for block, pb in zip(ours.blocks, plain.blocks, strict=True):
        for name, linear in (
            ("q_proj", pb.q),
            ("k_proj", pb.k),
            ("v_proj", pb.v),
            ("o_proj", pb.o),
        ):
            assert torch.equal(getattr(block.attn, name).weight, linear.weight), name
        assert torch.equal(block.mlp.fc_in.weight, pb.fc1.weight)
        assert torch.equal(block.mlp.fc_out.weight, pb.fc2.weight)
    assert torch.equal(ours.W_U, plain.head.weight.T)  # the head drawn in nn.Linear's layout


def test_twin_model_computes_the_plain_models_logits():
    with torch.random.fork_rng(devices=[]):
        plain = PlainModel().double()
    ours = Transformer(twin_model_config(), seed=42, dtype=torch.float64)
    x = ModularArithmetic(47).val_inputs
    torch.testing.assert_close(ours(x)[:, -1], plain(x), rtol=0, atol=1e-12)

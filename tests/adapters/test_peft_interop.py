"""gaugelab adapters against the real PEFT library, both directions (float64, offline)."""

import os

import pytest
import torch
from torch import nn

os.environ.setdefault("HF_HUB_OFFLINE", "1")
peft = pytest.importorskip("peft")
from peft import LoraConfig, PeftModel, get_peft_model  # noqa: E402

from gaugelab.adapters import Adapter  # noqa: E402
from gaugelab.models import Transformer, TransformerConfig  # noqa: E402
from gaugelab.models.lora import inject_lora, lora_parameter_groups, merge_lora  # noqa: E402

F64 = torch.float64
TOL = 1e-12
SMALL = TransformerConfig(
    n_layers=2, d_model=16, n_heads=2, d_head=8, d_mlp=24, d_vocab=11, n_ctx=5
)
TARGETS = ["q_proj", "v_proj", "fc_in", "fc_out"]
SETTINGS = {
    "plain": dict(r=4, lora_alpha=8),
    "rslora": dict(r=4, lora_alpha=8, use_rslora=True),
    "patterns": dict(
        r=4,
        lora_alpha=8,
        rank_pattern={"v_proj": 2, "^blocks\\.1\\.mlp\\.fc_in": 6, "0.attn.q_proj": 20},
        alpha_pattern={"1.attn.v_proj": 3, "fc_out": 5},
    ),
    "rslora-patterns": dict(
        r=3,
        lora_alpha=6,
        use_rslora=True,
        rank_pattern={"^blocks\\.0\\.attn\\.q_proj": 1},
        alpha_pattern={"mlp.fc_in": 2.5},
    ),
}


def gen(seed):
    return torch.Generator().manual_seed(seed)


def data(seed=0):
    x = torch.randint(0, SMALL.d_vocab, (4, SMALL.n_ctx), generator=gen(seed))
    return x, torch.randint(0, SMALL.d_vocab, (4, SMALL.n_ctx), generator=gen(seed + 1))


def base():
    return Transformer(SMALL, seed=0, dtype=F64)


def train(model, params, steps=3):
    """A few Adam steps on a next-token loss: B leaves zero and A moves."""
    opt = torch.optim.Adam(params, lr=1e-2)
    x, y = data()
    for _ in range(steps):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x).reshape(-1, SMALL.d_vocab), y.reshape(-1))
        loss.backward()
        opt.step()


def peft_layers(peft_model):
    """Path (relative to our model) → PEFT's LoRA layer."""
    inner = peft_model.base_model.model
    return {n: m for n, m in inner.named_modules() if isinstance(m, peft.tuners.lora.LoraLayer)}


@pytest.fixture(scope="module")
def trained_by_peft(tmp_path_factory):
    """For each setting: a PEFT model trained on our Transformer and its save_pretrained dir."""
    out = {}
    for i, (name, settings) in enumerate(SETTINGS.items()):
        with torch.random.fork_rng(devices=[]):  # PEFT draws A from the global generator
            torch.manual_seed(i)
            model = get_peft_model(base(), LoraConfig(target_modules=TARGETS, **settings))
        train(model, [p for p in model.parameters() if p.requires_grad])
        folder = tmp_path_factory.mktemp(name)
        model.save_pretrained(folder)
        out[name] = (model, folder)
    return out


@pytest.mark.parametrize("setting", SETTINGS)
def test_peft_adapter_reads_with_peft_delta_weights_and_scales(trained_by_peft, setting):
    model, folder = trained_by_peft[setting]
    adapter = Adapter.load(folder)
    layers = peft_layers(model)
    assert set(adapter.modules) == set(layers)
    for path, layer in layers.items():
        assert layer.lora_B["default"].weight.abs().max() > 0  # training moved B
        m = adapter.modules[path]
        assert m.r == layer.r["default"] and m.scale == layer.scaling["default"]
        expected = layer.get_delta_weight("default")
        assert (adapter.delta_weight(path) - expected).abs().max() <= TOL, path


@pytest.mark.parametrize("setting", SETTINGS)
def test_peft_adapter_applied_by_gaugelab_gives_peft_logits(trained_by_peft, setting):
    model, folder = trained_by_peft[setting]
    ours = base()
    Adapter.load(folder).apply(ours)
    x, _ = data(5)
    with torch.no_grad():
        assert (ours(x) - model(x)).abs().max() <= TOL


@pytest.mark.parametrize("setting", SETTINGS)
def test_inject_lora_adapts_what_peft_adapts(setting):
    settings = dict(SETTINGS[setting])
    theirs = peft_layers(get_peft_model(base(), LoraConfig(target_modules=TARGETS, **settings)))
    r, alpha = settings.pop("r"), settings.pop("lora_alpha")
    ours = inject_lora(base(), TARGETS, r, alpha, **settings)
    assert list(ours) == list(theirs)
    for path, layer in ours.items():
        assert (layer.r, layer.scale) == (
            theirs[path].r["default"],
            theirs[path].scaling["default"],
        )
        assert layer.lora_A.shape == theirs[path].lora_A["default"].weight.shape
        assert layer.lora_B.shape == theirs[path].lora_B["default"].weight.shape


@pytest.mark.parametrize("setting", SETTINGS)
def test_gaugelab_adapter_loads_in_peft_with_the_same_logits(tmp_path, setting):
    settings = dict(SETTINGS[setting])
    r, alpha = settings.pop("r"), settings.pop("lora_alpha")
    ours = base()
    layers = inject_lora(ours, TARGETS, r, alpha, seed=3, **settings)
    train(ours, lora_parameter_groups(ours, lr_A=1e-2, lr_B=2e-2))
    folder = Adapter.from_model(ours).save(tmp_path / "adapter")
    loaded = PeftModel.from_pretrained(base(), folder)
    theirs = peft_layers(loaded)
    assert set(theirs) == set(layers)
    for path, layer in layers.items():
        assert theirs[path].scaling["default"] == layer.scale, path
        diff = theirs[path].get_delta_weight("default") - layer.delta_weight()
        assert diff.abs().max() <= TOL, path
    x, _ = data(7)
    with torch.no_grad():
        assert (loaded(x) - ours(x)).abs().max() <= TOL
    for layer in theirs.values():  # PEFT's merge of our factors equals ours
        layer.merge()
    merge_lora(ours)
    for path, layer in theirs.items():
        diff = layer.get_base_layer().weight - layers[path].base_layer.weight
        assert diff.abs().max() <= TOL, path


class _GPT2Like(nn.Module):
    """Two GPT-2 ``Conv1D`` layers (weights ``[d_in, d_out]``): PEFT's fan_in_fan_out case."""

    def __init__(self):
        super().__init__()
        from transformers.pytorch_utils import Conv1D

        self.c_attn = Conv1D(24, 16)  # nf (out), nx (in)
        self.c_proj = Conv1D(16, 24)

    def forward(self, x):
        return self.c_proj(torch.tanh(self.c_attn(x)))


def test_fan_in_fan_out_adapter_gives_peft_delta_weights(tmp_path):
    pytest.importorskip("transformers")
    config = LoraConfig(r=2, lora_alpha=4, target_modules=["c_attn", "c_proj"], fan_in_fan_out=True)
    with torch.random.fork_rng(devices=[]):  # PEFT and Conv1D draw from the global generator
        torch.manual_seed(0)
        model = get_peft_model(_GPT2Like().to(F64), config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen(1), dtype=F64))
    model.save_pretrained(tmp_path)
    adapter = Adapter.load(tmp_path)
    assert adapter.config.fan_in_fan_out
    for path, layer in peft_layers(model).items():
        expected = layer.get_delta_weight("default")  # [d_in, d_out], the Conv1D layout
        assert expected.shape == layer.get_base_layer().weight.shape
        assert (adapter.delta_weight(path) - expected).abs().max() <= TOL, path

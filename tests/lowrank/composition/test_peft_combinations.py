"""``lora compose`` against PEFT's own ``add_weighted_adapter`` on adapters PEFT made and saved
(a tiny Llama built from its config, float64, nothing downloaded): ``cat`` and ``svd`` give
PEFT's updates, read back by PEFT from the folder gaugelab writes; PEFT's ``linear`` is not the
sum of the updates, which is why ``lora compose`` has no such method."""

import warnings

import pytest
import torch

from gaugelab.adapters import Adapter
from gaugelab.experiments.lora_compare.compose import compose_lora

transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

F64 = torch.float64
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
WEIGHTS = (0.75, -1.25)  # in float32 exactly: PEFT's svd carries the weights as float32
SOURCES = ({"r": 4, "lora_alpha": 8}, {"r": 3, "lora_alpha": 5},  # two ranks, two scales
           {"r": 4, "lora_alpha": 2})  # a2: a0's rank, for PEFT's linear


def _llama():
    config = transformers.LlamaConfig(hidden_size=16, intermediate_size=24, num_hidden_layers=2,
                                      num_attention_heads=2, num_key_value_heads=2,
                                      vocab_size=11)  # fmt: skip
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return transformers.LlamaForCausalLM(config).to(F64)


def _layers(model):
    """Module path (as in the adapter file) → PEFT's LoRA layer."""
    inner = model.base_model.model
    return {n: m for n, m in inner.named_modules() if isinstance(m, peft.tuners.lora.LoraLayer)}


@pytest.fixture(scope="module")
def combined(tmp_path_factory):
    """Adapters saved by PEFT (random B: ``init_lora_weights=False``), and a PEFT model holding
    them and PEFT's ``cat`` and ``svd`` (rank 3) of a0 and a1, and ``linear`` of a0 and a2."""
    tmp = tmp_path_factory.mktemp("peft-combinations")
    folders = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for j, settings in enumerate(SOURCES):
            base = _llama()
            with torch.random.fork_rng(devices=[]):  # PEFT draws the factors from it
                torch.manual_seed(10 + j)
                config = peft.LoraConfig(target_modules=TARGETS, init_lora_weights=False,
                                         **settings)  # fmt: skip
                model = peft.get_peft_model(base, config)
            model.save_pretrained(tmp / f"a{j}")
            folders.append(tmp / f"a{j}")
        model = peft.PeftModel.from_pretrained(_llama(), str(folders[0]), adapter_name="a0")
        for j in (1, 2):
            model.load_adapter(str(folders[j]), adapter_name=f"a{j}")
        model.add_weighted_adapter(["a0", "a1"], list(WEIGHTS), "cat", "cat")
        model.add_weighted_adapter(["a0", "a1"], list(WEIGHTS), "svd", "svd", svd_rank=3)
        model.add_weighted_adapter(["a0", "a2"], list(WEIGHTS), "linear", "linear")
    return folders[:2], model, tmp


@pytest.mark.parametrize(("method", "rank"), [("cat", None), ("svd", 3)])
def test_compose_gives_peft_add_weighted_adapter_updates(combined, method, rank):
    folders, model, tmp = combined
    out = tmp / f"ours-{method}"
    compose_lora([str(f) for f in folders], out, store=tmp / "none.sqlite", weights=WEIGHTS,
                 method=method, rank=rank, evaluate=False)  # fmt: skip
    ours = Adapter.load(out)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.load_adapter(str(out), adapter_name=f"ours-{method}")  # PEFT reads what we wrote
    layers = _layers(model)
    assert set(ours.modules) == set(layers) and len(layers) == 2 * len(TARGETS)
    for module, layer in layers.items():
        theirs = layer.get_delta_weight(method)
        scale = theirs.norm()
        assert float(scale) > 0.1  # a real update, not B = 0
        ours_delta = ours.delta_weight(module).to(F64)
        written = layer.get_delta_weight(f"ours-{method}")
        tol = 1e-12 if method == "cat" else 1e-9  # svd: two SVD routes to one truncation
        assert float((ours_delta - theirs).norm() / scale) < tol, module
        assert float((written - theirs).norm() / scale) < tol, module
        if method == "cat":  # both are the exact weighted sum of the updates
            pairs = zip(WEIGHTS, ("a0", "a1"), strict=True)
            exact = sum(w * layer.get_delta_weight(a) for w, a in pairs)
            assert float((theirs - exact).norm() / scale) < 1e-12, module


def test_peft_linear_adds_factors_not_updates(combined):
    """PEFT's ``linear`` (one rank only) writes ``(Σ_j √|λ_j s_j| B_j)(Σ_j ±√|λ_j s_j| A_j)``,
    the sign of ``λ_j`` on A: the sum of the updates plus the cross terms ``B_i A_j``, which
    is why ``lora compose`` offers ``cat`` (the exact sum) and no ``linear``."""
    _, model, _ = combined
    names = ("a0", "a2")
    for module, layer in _layers(model).items():
        A = [layer.lora_A[a].weight for a in names]
        B = [layer.lora_B[a].weight for a in names]
        roots = torch.tensor([abs(w * layer.scaling[a]) ** 0.5  # PEFT holds them in float32
                              for w, a in zip(WEIGHTS, names, strict=True)]).to(F64)  # fmt: skip
        signs = [1.0 if w >= 0 else -1.0 for w in WEIGHTS]
        closed = (roots[0] * B[0] + roots[1] * B[1]) @ (
            signs[0] * roots[0] * A[0] + signs[1] * roots[1] * A[1])
        linear = layer.get_delta_weight("linear")
        assert float((linear - closed).norm() / closed.norm()) < 1e-12, module
        exact = sum(w * layer.get_delta_weight(a) for w, a in zip(WEIGHTS, names, strict=True))
        assert float((linear - exact).norm() / exact.norm()) > 0.1, module

"""The evidence ladder on a user's Hugging Face model: GPT-2 (``Conv1D``) and Llama bases built
from tiny configs and saved here, adapters made by PEFT (B non-zero), data as text and JSONL.
Every number checked is recomputed independently, in float64: the inputs captured by hooks on
PEFT's own model in one forward pass over every window, PEFT's ``get_delta_weight``, and dense
SVDs."""

from __future__ import annotations

import json
import warnings

import pytest
import torch
from tests.support.hf_adapters import TEXT, make_base_and_adapter

from gaugelab.experiments.lora.hf_ladder import HFEvidence
from gaugelab.experiments.lora.inspect import inspect_lora
from gaugelab.experiments.lora.ladder import capture_moments
from gaugelab.models.hf import load_hf_model
from gaugelab.tasks.token_windows import token_windows, utf8_bytes

transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

pytestmark = pytest.mark.usefixtures("one_thread")

F64 = torch.float64
WINDOW, TOKENS = 16, 64  # 4 windows of 16 positions: N = 64 rows per module, d_in = 32


def _make(tmp, family):
    return make_base_and_adapter(tmp, family, transformers, peft)


@pytest.fixture(scope="module")
def made(tmp_path_factory, one_thread):
    tmp = tmp_path_factory.mktemp("hf-ladder")
    (tmp / "data.txt").write_text(TEXT)
    lines = [json.dumps({"text": line, "id": i}) for i, line in enumerate(TEXT.splitlines())]
    (tmp / "data.jsonl").write_text("\n".join(lines) + "\n")
    return tmp, {family: _make(tmp, family) for family in ("gpt2", "llama")}


def _peft_inputs(model, windows):
    """Module path → ``[N, d_in]`` float64 inputs of each LoRA layer of PEFT's model, captured
    on every window in one forward pass, and the model's mean next-token loss."""
    seen = {}
    layers = {name.removeprefix("base_model.model."): m for name, m in model.named_modules()
              if isinstance(m, peft.tuners.lora.LoraLayer)}  # fmt: skip
    hooks = [m.register_forward_hook(lambda _m, args, _o, p=p: seen.__setitem__(
        p, args[0].detach().flatten(0, -2))) for p, m in layers.items()]  # fmt: skip
    with torch.no_grad():
        logits = model(windows[:, :-1]).logits
    for h in hooks:
        h.remove()
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), windows[:, 1:].flatten())
    deltas = {p: m.get_delta_weight("default").detach() for p, m in layers.items()}
    return seen, deltas, float(loss)


@pytest.mark.parametrize(("family", "data"), [("gpt2", "data.txt"), ("llama", "data.jsonl")])
def test_the_ladder_equals_the_dense_computation_on_peft_inputs(made, family, data):
    tmp, models = made
    model = models[family]
    hf = HFEvidence(base=tmp / f"{family}-base", data=tmp / data, tokens=TOKENS, window=WINDOW,
                    dtype="float64", batch=1)  # fmt: skip
    result = inspect_lora(tmp / f"{family}-adapter", store=tmp / "none.sqlite", ranks=(1, 2, 4),
                          hf=hf)  # fmt: skip
    assert result.has_ladder and len(result.joint) == 3
    assert not any(n.startswith("evidence ladder") for n in result.not_computed)
    docs = TEXT.splitlines() if data.endswith("jsonl") else [TEXT]
    windows = token_windows(docs, utf8_bytes, tokens=TOKENS, window=WINDOW)
    assert windows.shape == (4, WINDOW + 1)
    X, deltas, loss = _peft_inputs(model, windows)
    assert result.reference["target"] == pytest.approx(loss, rel=1e-9)
    for m in result.modules:
        delta = deltas[m.module].T if family == "gpt2" else deltas[m.module]  # [d_out, d_in]
        x = X[m.module]  # [64, d_in]
        assert tuple(delta.shape) == m.shape and x.shape[0] == 64
        y = x @ delta.mT  # [N, d_out]
        U, S, Vh = torch.linalg.svd(delta)
        lam, Q = torch.linalg.eigh(x.mT @ x / 64)  # the support: λ > λ_max·d_in·eps(float32)
        keep = lam > lam[-1] * m.shape[1] * torch.finfo(torch.float32).eps
        support = int(keep.sum())
        P = Q[:, keep] @ Q[:, keep].mT  # [d_in, d_in] onto the support
        seen = torch.linalg.svdvals(x @ P @ delta.mT) ** 2  # outputs through the support
        blind = float(((x @ (torch.eye(m.shape[1], dtype=F64) - P) @ delta.mT) ** 2).sum())
        for row in m.ladder:
            r = row.rank
            assert row.n_samples == 64
            assert row.support_rank == support
            assert row.output_energy == pytest.approx(float((y**2).sum()) / 64, rel=1e-9)
            dense_r = (U[:, :r] * S[:r]) @ Vh[:r]
            svd = float(((x @ (delta - dense_r).mT) ** 2).sum()) / 64
            assert row.output_residual_svd == pytest.approx(svd, rel=1e-9, abs=1e-12)
            # the output-weighted optimum over the support: Eckart–Young on the outputs
            # X P ΔWᵀ, plus what the support leaves out, (1/N)‖X (I − P) ΔWᵀ‖_F²
            ow = (float(seen[r:].sum()) + blind) / 64
            assert row.output_residual_ow == pytest.approx(ow, rel=1e-9, abs=1e-12)
        whole = m.ladder[-1]  # rank 4 = the adapter's: the update kept whole
        assert whole.loss_svd == pytest.approx(result.reference["target"], rel=1e-12)
        assert whole.output_residual_svd == pytest.approx(0, abs=1e-12 * whole.output_energy)


def test_the_streamed_gram_is_xtx_of_one_forward_pass(made):
    tmp, _ = made
    windows = token_windows([TEXT], utf8_bytes, tokens=TOKENS, window=WINDOW)
    base = load_hf_model(tmp / "gpt2-base", dtype=F64).model
    modules = ["transformer.h.0.attn.c_attn", "transformer.h.1.mlp.c_fc",
               "transformer.h.1.mlp.c_proj"]
    batches = [(w[:, :-1], w[:, 1:]) for w in torch.split(windows, 1)]  # one window at a time
    moments = capture_moments(base, modules, batches)
    seen = {}
    hooks = [base.get_submodule(p).register_forward_hook(lambda _m, a, _o, p=p: seen.__setitem__(
        p, a[0].detach().flatten(0, -2))) for p in modules]  # fmt: skip
    with torch.no_grad():
        base(windows[:, :-1])  # every window at once
    for h in hooks:
        h.remove()
    for p in modules:
        X = seen[p]
        assert moments[p].count == X.shape[0] == 64
        scale = float((X**2).sum())
        torch.testing.assert_close(moments[p].gram, X.mT @ X, rtol=0, atol=1e-9 * scale)


def test_refusals_are_one_line_and_name_the_option(made, tmp_path):
    tmp, _ = made
    adapter, store = tmp / "gpt2-adapter", tmp / "none.sqlite"

    def inspect(**kw):
        options = dict(base=tmp / "gpt2-base", data=tmp / "data.txt", tokens=TOKENS,
                       window=WINDOW) | kw  # fmt: skip
        return inspect_lora(adapter, store=store, ranks=(1,), hf=HFEvidence(**options))

    short = tmp_path / "short.txt"
    short.write_text("too short")
    with pytest.raises(ValueError, match=r"^--data: .*too short: 9 token\(s\); allowed: at least"):
        inspect(data=short)
    with pytest.raises(FileNotFoundError, match="--data"):
        inspect(data=tmp_path / "missing.txt")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"body": "x"}\n')
    with pytest.raises(ValueError, match=r"line 1 has no string field 'text'"):
        inspect(data=bad)
    config_only = tmp_path / "config-only"
    transformers.GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=300,
                            n_positions=64).save_pretrained(config_only)  # fmt: skip
    with pytest.raises(ValueError, match=r"holds no safetensors weights.*--random-base"):
        inspect(base=config_only)
    assert inspect(base=config_only, random_init=True).has_ladder
    narrow, shallow = tmp_path / "narrow", tmp_path / "shallow"
    for folder, config in ((narrow, dict(n_embd=16, n_layer=2)),
                           (shallow, dict(n_embd=32, n_layer=1))):
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
            n_head=2, vocab_size=300, n_positions=64, **config))  # fmt: skip
        model.save_pretrained(folder)
    with pytest.raises(ValueError, match=r"c_attn' is 96×32 \(d_out×d_in\) in the adapter but "
                       r"48×16 in"):  # fmt: skip
        inspect(base=narrow)
    with pytest.raises(ValueError, match=r"'transformer\.h\.1\.attn\.c_attn' is not a module of"):
        inspect(base=shallow)
    for bad_option, match in ((dict(tokens=0), "--tokens 0"), (dict(head="seq2seq"), "--head"),
                              (dict(dtype="float16"), "--dtype"), (dict(window=500), "--tokens")):
        with pytest.raises(ValueError, match=match):
            inspect(**bad_option)


def test_a_backbone_gets_the_ladder_without_losses(made):
    tmp, _ = made
    hf = HFEvidence(base=tmp / "llama-base", data=tmp / "data.txt", tokens=TOKENS, window=WINDOW,
                    head="base")  # fmt: skip
    with pytest.raises(ValueError, match=r"is not a module of .*head base"):
        inspect_lora(tmp / "llama-adapter", store=tmp / "none.sqlite", ranks=(1,), hf=hf)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        backbone = peft.get_peft_model(transformers.LlamaModel.from_pretrained(tmp / "llama-base"),
                                       peft.LoraConfig(r=2, target_modules=["o_proj"],
                                                       init_lora_weights=False))  # fmt: skip
    backbone.save_pretrained(tmp / "backbone-adapter")
    result = inspect_lora(tmp / "backbone-adapter", store=tmp / "none.sqlite", ranks=(1,),
                          hf=HFEvidence(**{**hf.__dict__, "head": "auto"}))  # fmt: skip
    assert result.has_ladder and not result.joint and "target" not in result.reference
    rows = [row for m in result.modules for row in m.ladder]
    assert len(rows) == 2 and all(r.loss_svd is None and r.loss_ow is None for r in rows)
    assert all(r.output_residual_ow <= r.output_residual_svd < r.output_energy for r in rows)
    assert any("language-model head" in n for n in result.not_computed)

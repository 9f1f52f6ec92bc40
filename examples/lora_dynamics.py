"""LoRA factor dynamics on the character model: zero-product starts and rank scaling.

Measures, on gaugelab's small character Transformer (pretrained on tiny-shakespeare, adapted
on the standard-library target text; ``gaugelab.experiments.lora.run``):

(a) the four zero-product initialisations of seed 003 §0x07F — standard (A random, B = 0),
    reversed (A = 0, B random), both zero, and cancelling (both nonzero, B A = 0) — their
    first-step factor gradients (which factor receives gradient) and AdamW learning curves on
    the target domain's validation loss;
(b) the initial product step ``‖s(B⁺A⁺ − B A)‖_F`` of one plain-SGD step at the standard start,
    against rank r ∈ {1, 4, 16, 64}, for the scales ``α/r`` (p = 1) and ``α/√r`` (p = 1/2)
    with the down factor's row variance constant (q = 0) or ∝ 1/r (q = 1); the fitted log–log
    slope against the predicted exponent ``1 − 2p − q`` of the coefficient ``s² r σ_A²``
    (seed 003 §0x08F, :func:`gaugelab.lowrank.dynamics.motion.rank_scaling_exponent`). Reported for
    the mean product step over seeds (the seed's expectation ``E[Δ̇₀]``), the mean ``‖∇_B‖²``
    (the seed's exact second moment) and the mean step norm (not covered by the derivation).

Run: ``nice -n 10 .venv/bin/python examples/lora_dynamics.py --out /tmp/lora_dynamics.json``
(about 10 minutes niced on 2 shared cores; ``--quick`` for a seconds-long smoke run).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from fractions import Fraction
from pathlib import Path

import safetensors
import safetensors.torch
import torch

from gaugelab.experiments.lora.run import ALL_TARGETS, PretrainSpec, train_pretrain
from gaugelab.lowrank.dynamics.motion import MECHANISMS, rank_scaling_exponent
from gaugelab.models.lora import inject_lora, lora_modules
from gaugelab.tasks import TwoDomainText


def _loss(model, x, y):
    logits = model(x)
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def _adapted(base_state, spec, d_vocab, r, alpha, factors, use_rslora=False):
    from gaugelab.models import Transformer

    model = Transformer(spec.transformer_config(d_vocab), dtype=torch.float32)
    model.load_state_dict(base_state, strict=True)
    inject_lora(
        model, list(ALL_TARGETS), r, alpha, init="given", factors=factors, use_rslora=use_rslora
    )
    return model


def _shapes(model):
    return {
        name: (module.out_features, module.in_features)
        for name, module in model.named_modules()
        if isinstance(module, torch.nn.Linear) and name.split(".")[-1] in ALL_TARGETS
    }


LIBRARY_INIT = {"standard": "peft-default", "reversed": "reversed", "both-zero": "zero"}
"""Mechanism → the ``inject_lora`` initialisation family that realises it (the standard
mechanism, random A and B = 0, drawn as PEFT draws it: the measurements of
docs/lowrank-dynamics.md were taken so)."""


def _library_factors(base_state, spec, d_vocab, r, alpha, init, seed):
    """``path → (A, B)`` drawn by ``inject_lora``'s own initialisation ``init``."""
    from gaugelab.models import Transformer

    model = Transformer(spec.transformer_config(d_vocab), dtype=torch.float32)
    model.load_state_dict(base_state, strict=True)
    layers = inject_lora(model, list(ALL_TARGETS), r, alpha, init=init, seed=seed)
    return {k: (m.lora_A.detach().clone(), m.lora_B.detach().clone()) for k, m in layers.items()}


def _zero_product_factors(kind, base_state, spec, d_vocab, r, alpha, seed):
    """``path → (A [r, d_in], B [d_out, r])`` for one of the four mechanisms: the first three
    are ``inject_lora``'s families; ``cancelling`` (not a family) takes the standard family's
    random ``A`` and the reversed family's random ``B`` and gives them complementary latent
    coordinates (``B`` uses ``[0, r/2)``, ``A`` only ``[r/2, r)``), so ``B A = 0``."""
    if kind in LIBRARY_INIT:
        return _library_factors(base_state, spec, d_vocab, r, alpha, LIBRARY_INIT[kind], seed)
    std = _library_factors(base_state, spec, d_vocab, r, alpha, LIBRARY_INIT["standard"], seed)
    rev = _library_factors(base_state, spec, d_vocab, r, alpha, "reversed", seed)
    out = {}
    for path in std:
        A, B = std[path][0].clone(), rev[path][1].clone()
        B[:, r // 2 :] = 0
        A[: r // 2] = 0
        out[path] = (A, B)
    return out


def part_a(base_state, spec, corpus, *, r, alpha, steps, eval_every, lr, seed):
    target = corpus.domain("target")
    gen_val = torch.Generator().manual_seed(spec.eval_seed)
    val = [target.get_batch("val", 32, gen_val) for _ in range(4)]
    results = {}
    for kind in MECHANISMS:
        torch.manual_seed(seed)
        factors = _zero_product_factors(kind, base_state, spec, corpus.d_vocab, r, alpha, seed)
        model = _adapted(base_state, spec, corpus.d_vocab, r, alpha, factors)
        layers = lora_modules(model)
        product0 = sum(float(m.delta_weight().detach().norm() ** 2) for m in layers.values()) ** 0.5
        params = [p for m in layers.values() for p in (m.lora_A, m.lora_B)]
        opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
        stream = torch.Generator().manual_seed(seed + 1)
        curve, first = [], None
        for step in range(steps + 1):
            if step % eval_every == 0 or step == steps:
                with torch.no_grad():
                    curve.append((step, sum(float(_loss(model, x, y)) for x, y in val) / len(val)))
            if step == steps:
                break
            x, y = target.get_batch("train", 16, stream)
            opt.zero_grad()
            _loss(model, x, y).backward()
            if first is None:
                gA = sum(float(m.lora_A.grad.norm() ** 2) for m in layers.values()) ** 0.5
                gB = sum(float(m.lora_B.grad.norm() ** 2) for m in layers.values()) ** 0.5
                first = {"grad_A_norm": gA, "grad_B_norm": gB}
            opt.step()
        results[kind] = {"initial_product_norm": product0, **first, "curve": curve}
        print(
            f"(a) {kind:10s} ‖sBA‖={product0:.3g} ‖∇A‖={first['grad_A_norm']:.3e} "
            f"‖∇B‖={first['grad_B_norm']:.3e} val loss {curve[0][1]:.4f} → {curve[-1][1]:.4f}",
            flush=True,
        )
    return results


def _shapes_of(base_state, spec, corpus):
    from gaugelab.models import Transformer

    model = Transformer(spec.transformer_config(corpus.d_vocab), dtype=torch.float32)
    return _shapes(model)


def _dense_gradients(base_state, spec, corpus, x, y):
    """``G_m = ∂L/∂W_m`` of every target weight at the base model (= at ``B = 0``)."""
    from gaugelab.models import Transformer

    model = Transformer(spec.transformer_config(corpus.d_vocab), dtype=torch.float32)
    model.load_state_dict(base_state, strict=True)
    weights = {n: m.weight for n, m in model.named_modules() if n in _shapes(model)}
    _loss(model, x, y).backward()
    return {n: w.grad.detach().double() for n, w in weights.items()}


def part_b(base_state, spec, corpus, *, ranks, alpha, seeds, lr):
    target = corpus.domain("target")
    x, y = target.get_batch("train", 32, torch.Generator().manual_seed(7))
    shapes = _shapes_of(base_state, spec, corpus)
    G = _dense_gradients(base_state, spec, corpus, x, y)
    rules = [("α/r", Fraction(1)), ("α/√r", Fraction(1, 2))]
    out = []
    for q in (0, 1):
        for label, p in rules:
            rows = {}
            for r in ranks:
                steps, grad_sq, norms = {}, [], []
                for seed in range(seeds):
                    gen = torch.Generator().manual_seed(1000 * r + seed)
                    factors = {}
                    for path, (d_out, d_in) in shapes.items():
                        sigma2 = (1.0 / d_in) * r ** (-q)  # row covariance σ_A² I, σ_A² = κ r^{−q}
                        A = torch.randn(r, d_in, generator=gen) * math.sqrt(sigma2)
                        factors[path] = (A, torch.zeros(d_out, r))
                    model = _adapted(
                        base_state,
                        spec,
                        corpus.d_vocab,
                        r,
                        alpha,
                        factors,
                        use_rslora=(p == Fraction(1, 2)),
                    )
                    layers = lora_modules(model)
                    before = {k: m.delta_weight().detach().clone() for k, m in layers.items()}
                    params = [t for m in layers.values() for t in (m.lora_A, m.lora_B)]
                    opt = torch.optim.SGD(params, lr=lr)
                    opt.zero_grad()
                    _loss(model, x, y).backward()
                    grad_sq.append(sum(float(m.lora_B.grad.norm() ** 2) for m in layers.values()))
                    opt.step()
                    total = 0.0
                    for k, m in layers.items():
                        d = (m.delta_weight().detach() - before[k]).double()
                        steps[k] = steps.get(k, 0) + d / seeds
                        total += float(d.norm() ** 2)
                    norms.append(total**0.5)
                mean_step = sum(float(v.norm() ** 2) for v in steps.values()) ** 0.5
                # predictions (seed 003 §0x08F): E[step_m] = −η s² r σ_m² G_m and
                # E‖∇_B‖² = Σ_m s² r σ_m² ‖G_m‖², with σ_m² = r^{−q}/d_in
                s_ = alpha / (r if p == 1 else math.sqrt(r))
                sig = {k: r ** (-q) / shapes[k][1] for k in shapes}
                pred_step = (
                    sum((lr * s_**2 * r * sig[k] * float(G[k].norm())) ** 2 for k in shapes) ** 0.5
                )
                pred_grad = sum(s_**2 * r * sig[k] * float(G[k].norm()) ** 2 for k in shapes)
                rows[r] = {
                    "predicted_mean_step_norm": pred_step,
                    "predicted_grad_B_sq": pred_grad,
                    "mean_step_norm": mean_step,
                    "mean_of_norms": sum(norms) / seeds,
                    "mean_grad_B_sq": sum(grad_sq) / seeds,
                }
            predicted = float(rank_scaling_exponent(p, q))
            lr_ = [math.log(r) for r in ranks]

            def slope(key, rows=rows, lr_=lr_):
                ys = [math.log(rows[r][key]) for r in ranks]
                mx, my = sum(lr_) / len(lr_), sum(ys) / len(ys)
                return sum((a - mx) * (b - my) for a, b in zip(lr_, ys, strict=True)) / sum(
                    (a - mx) ** 2 for a in lr_
                )

            entry = {
                "scale": label,
                "p": str(p),
                "q": q,
                "predicted_exponent": predicted,
                "slope_mean_step": slope("mean_step_norm"),
                "slope_grad_B_sq": slope("mean_grad_B_sq"),
                "slope_mean_of_norms": slope("mean_of_norms"),
                "by_rank": rows,
            }
            out.append(entry)
            print(
                f"(b) q={q} s={label:5s} predicted {predicted:+.2f}  slope: mean step "
                f"{entry['slope_mean_step']:+.3f}, E‖∇B‖² {entry['slope_grad_B_sq']:+.3f}, "
                f"mean ‖step‖ {entry['slope_mean_of_norms']:+.3f}",
                flush=True,
            )
            for r in ranks:
                row = rows[r]
                print(
                    f"    r={r:3d}: mean step {row['mean_step_norm']:.4g} (predicted "
                    f"{row['predicted_mean_step_norm']:.4g}), "
                    f"mean ‖∇B‖² {row['mean_grad_B_sq']:.4g} "
                    f"(predicted {row['predicted_grad_B_sq']:.4g})",
                    flush=True,
                )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="/tmp/lora_dynamics.json", help="JSON results file")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (seconds)")
    parser.add_argument("--pretrain-steps", type=int, default=600)
    parser.add_argument("--steps", type=int, default=200, help="fine-tuning steps in (a)")
    parser.add_argument("--seeds", type=int, default=32, help="A₀ draws per rank in (b)")
    parser.add_argument("--parts", default="ab", help="which measurements: a, b or ab")
    parser.add_argument("--base-cache", default="", help="safetensors file caching the base")
    args = parser.parse_args()
    torch.set_num_threads(1)
    start = time.perf_counter()
    spec = PretrainSpec(
        steps=args.pretrain_steps,
        eval_every=max(args.pretrain_steps // 4, 1),
        checkpoint_every=10**6,
    )
    if args.quick:
        spec = PretrainSpec(
            n_layers=1,
            d_model=32,
            n_heads=2,
            d_mlp=64,
            steps=5,
            batch_size=8,
            eval_every=5,
            val_batches=2,
            val_batch_size=8,
            warmup=2,
            checkpoint_every=10**6,
        )
        args.steps, args.seeds = 4, 2
    cache = Path(args.base_cache) if args.base_cache and not args.quick else None
    identity = spec.identity()  # the cache is used only for the same pretrain spec
    cached = None
    if cache is not None and cache.exists():
        with safetensors.safe_open(str(cache), framework="pt") as f:  # no pickle
            if (f.metadata() or {}).get("pretrain_identity") == identity:
                cached = {k: f.get_tensor(k) for k in f.keys()}
    if cached is not None:
        base_state, how = cached, f"read from {cache}"
    else:
        model, _curves = train_pretrain(spec)
        base_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        how = f"pretrained {spec.steps} steps"
        if cache is not None:
            metadata = {"pretrain_identity": identity}
            safetensors.torch.save_file(base_state, str(cache), metadata=metadata)
    corpus = TwoDomainText(spec.corpus)
    print(f"base model {how} ({time.perf_counter() - start:.0f}s)", flush=True)
    a = (
        None
        if "a" not in args.parts
        else part_a(
            base_state,
            spec,
            corpus,
            r=8,
            alpha=16.0,
            steps=args.steps,
            eval_every=max(args.steps // 10, 1),
            lr=5e-3,
            seed=0,
        )
    )
    b = (
        None
        if "b" not in args.parts
        else part_b(
            base_state, spec, corpus, ranks=(1, 4, 16, 64), alpha=16.0, seeds=args.seeds, lr=1e-2
        )
    )
    result = {
        "pretrain": spec.model_dump(mode="json"),
        "zero_product": a,
        "rank_scaling": b,
        "seconds": time.perf_counter() - start,
    }
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1, default=str)
    print(f"wrote {args.out} ({result['seconds']:.0f}s)")


if __name__ == "__main__":
    main()

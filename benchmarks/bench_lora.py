"""LoRA: the SVD of s·B A in factor space, and E = 4 LoRA seeds trained as one ensemble.

(a) ``gaugelab.lowrank.factored_svd`` (QR of B and Aᵀ, SVD of the r × r core; B A never formed)
against the peer that forms ``s·B A`` and takes its dense compact SVD, at 4096 × 4096 with
r = 64 (1024 × 1024 with ``--quick``), float32: time (target ≥ 50×) and peak memory. Peak memory
is the peak of live torch allocations during one call, as ``torch.profiler`` records them
(``profile_memory=True``; every op's own allocations and frees, in time order): tensors and the
work arrays torch allocates for LAPACK. tracemalloc cannot see them (they are not Python
objects).

(b) One AdamW training step (forward, backward, update) of E = 4 LoRA seeds of one rank as one
``models.Ensemble`` against the per-seed loop over four LoRA models on the same frozen base, on
the LoRA protocol's model (3 blocks, d_model 64, r = 4 on every projection, windows of 64
characters; target ≥ 1.5×) at batch sizes 1, 8 and 32 (1 with ``--quick``); the loop's cost per
seed-step is printed beside it. The ensemble is built as ``lora finetune`` builds it
(``Ensemble(models, sdpa=True)``): member-native (the stacked factors ``[E, …]`` in batched
matmuls, the frozen base stored once and applied as one matmul over all members' tokens, no
gradient for it; fused attention with the members folded into the kernel's batch, as the loop's
models call it). A row with the vmap ensemble (``native=False``: the path before the native
one, torch's per-member fallback for the fused kernel) shows what the native path gains. Batching
pays where the per-op overhead dominates (small batches); at the protocol's batch of 32 both
sides are bound by the same arithmetic, and the ensemble's elementwise work runs on E-times
larger tensors (out of cache). Two more rows per batch ask whether compilation closes that gap:
the same ensemble with ``compile=True`` (the native forward and its backward through
``torch.compile``; the optimizer step eager, as in the eager rows) against the same eager loop,
and against the loop with each model ``torch.compile``-d (token check outside the graph, as the
ensemble's is), so a reader sees whether a gain is batching or compilation alone. Before timing,
the compiled ensemble's per-member losses must equal the eager ensemble's to 1e-5 relative at
the first step and at the second (after a backward and an update), or the benchmark fails. The
first step of every side is untimed: that is where compilation happens, and its seconds are
printed beside the compiled sides' names (a few seconds when torch's on-disk cache already holds
the kernels). All timings are warmed up and interleaved (``gaugelab.cli.bench.time_calls``).
"""

from __future__ import annotations

import copy
import time

import torch
import torch.nn.functional as F
from torch import nn

from gaugelab.cli.bench import peak_mib, ratio_cell, time_calls
from gaugelab.determinism import deterministic, torch_compile
from gaugelab.lowrank import factored_svd
from gaugelab.models import Ensemble, Transformer, TransformerConfig
from gaugelab.models.lora import inject_lora
from gaugelab.optim import make_optimizer

TITLE = "LoRA: factor-space SVD of s·B A vs dense SVD; E = 4 seeds as one ensemble vs a loop"
COLUMNS = ["case", "ours", "ours ms", "peer", "peer ms", "ratio (peer / ours)", "target",
           "peak memory ours / peer (MiB)", "memory ratio (peer / ours)"]  # fmt: skip
RANK = 64
SCALE = 2.0  # α/r with α = 2r


def _svd_row(n: int, repeat: int) -> list:
    g = torch.Generator().manual_seed(0)
    B, A = torch.randn(n, RANK, generator=g), torch.randn(RANK, n, generator=g)
    ours, dense = factored_svd(B, A, SCALE), torch.linalg.svd((B @ A) * SCALE, full_matrices=False)
    # the two agree on the r leading singular values (the rest of the dense ones are ~0)
    assert torch.allclose(ours.S, dense.S[:RANK], rtol=1e-3), "factored and dense SVDs disagree"
    times = time_calls(
        {"factored": lambda: factored_svd(B, A, SCALE),
         "dense": lambda: torch.linalg.svd((B @ A) * SCALE, full_matrices=False)},
        number=1, repeat=repeat,
    )  # fmt: skip
    mine, _ = peak_mib(lambda: factored_svd(B, A, SCALE))
    peer, _ = peak_mib(lambda: torch.linalg.svd((B @ A) * SCALE, full_matrices=False))
    return [f"SVD of s·B A, {n}×{n}, r = {RANK}", "factored_svd", times["factored"].cell(),
            "B A + dense SVD", times["dense"].cell(digits=0),
            ratio_cell(times["dense"], times["factored"], digits=0), "≥ 50×",
            f"{mine:.2f} / {peer:.1f}", f"{peer / mine:.0f}×" if mine > 0 else "—"]  # fmt: skip


def _config() -> TransformerConfig:
    return TransformerConfig(
        n_layers=3, d_model=64, n_heads=4, d_head=16, d_mlp=256, d_vocab=161, n_ctx=64,
        act_fn="gelu", normalization="rmsnorm", positional="learned", causal=True, init_std=0.02,
    )  # fmt: skip


def _seed_models(members: int) -> list[Transformer]:
    base = Transformer(_config(), seed=0)
    models = []
    for seed in range(members):
        model = copy.deepcopy(base)
        inject_lora(model, ["q_proj", "k_proj", "v_proj", "o_proj", "fc_in", "fc_out"], 4, 8.0,
                    seed=seed)  # fmt: skip
        with torch.no_grad():  # B = 0 at init: give every factor a value, as after training
            for name, p in model.named_parameters():
                if name.endswith("lora_B"):
                    p.normal_(0, 0.02, generator=torch.Generator().manual_seed(seed))
        models.append(model)
    return models


def _ensemble_step(ensemble: Ensemble, x: torch.Tensor, y: torch.Tensor):
    """One AdamW step of every member (forward, loss, backward, update), as ``lora finetune``
    takes it; returns the ``[E]`` member losses (detached)."""
    members = ensemble.n_members
    opt = make_optimizer("adamw", [p for p in ensemble.parameters() if p.requires_grad],
                         lr=1e-3, weight_decay=0.0, member_dims=1)  # fmt: skip

    def step() -> torch.Tensor:
        opt.zero_grad(set_to_none=True)
        logits = ensemble(x, member_inputs=True)  # [E, B, T, V]
        loss = F.cross_entropy(logits.flatten(0, 2), y.flatten(), reduction="none")
        loss = loss.view(members, -1).mean(dim=1)
        loss.sum().backward()
        opt.step()
        return loss.detach()

    return step


class _CompiledModel(nn.Module):
    """A copy of ``model`` run through ``torch.compile``, its token check outside the graph (as
    the ensemble's is: its ``.item()`` would split the graph in two)."""

    def __init__(self, model: Transformer) -> None:
        super().__init__()
        self.model = copy.deepcopy(model)
        self.model.check_inputs = False
        self.__dict__["compiled"] = torch_compile(self.model, dynamic=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        self.model.validate_inputs(tokens)
        return self.compiled(tokens)


def _loop_step(models: list[nn.Module], x: torch.Tensor, y: torch.Tensor):
    """One AdamW step of each model in turn (the per-seed loop)."""
    opts = [make_optimizer("adamw", [p for p in m.parameters() if p.requires_grad], lr=1e-3,
                           weight_decay=0.0) for m in models]  # fmt: skip

    def step() -> None:
        for e, (model, opt) in enumerate(zip(models, opts, strict=True)):
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(x[e]).flatten(0, 1), y[e].flatten()).backward()
            opt.step()

    return step


def _check_compiled(eager, compiled, first: tuple[torch.Tensor, torch.Tensor]) -> None:
    """Fail unless the compiled ensemble's ``[E]`` losses equal the eager ensemble's to 1e-5
    relative at its first step and at a second one (after a backward and an AdamW update of
    both from the same start)."""
    pairs = [first, (eager(), compiled())]
    for step, (want, got) in enumerate(pairs, start=1):
        if not torch.allclose(got, want, rtol=1e-5, atol=0.0):
            worst = ((got - want).abs() / want.abs()).max().item()
            raise AssertionError(
                f"bench lora: at step {step} the compiled ensemble's losses {got.tolist()} "
                f"differ from the eager ensemble's {want.tolist()} by {worst:.1e} relative "
                "(allowed: 1e-5)"
            )


def _ensemble_rows(batch: int, repeat: int, number: int) -> list[list]:
    members = 4
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, 161, (members, batch, 64), generator=g)
    y = torch.randint(0, 161, (members, batch, 64), generator=g)
    models = _seed_models(members)
    ensemble = Ensemble(models, sdpa=True)  # as gaugelab lora finetune builds it
    assert ensemble.native and ensemble.shared_names, "a native ensemble on a shared base"
    compiled = Ensemble(models, sdpa=True, compile=True)  # the same, through torch.compile
    vmapped = Ensemble(models, sdpa=True, native=False)  # the path before the native one
    loop = [copy.deepcopy(m) for m in models]
    compiled_loop = [_CompiledModel(m) for m in models]
    steps = {"ensemble": _ensemble_step(ensemble, x, y),
             "compiled": _ensemble_step(compiled, x, y),
             "vmap": _ensemble_step(vmapped, x, y),
             "loop": _loop_step(loop, x, y),
             "compiled loop": _loop_step(compiled_loop, x, y)}  # fmt: skip
    first, warm = {}, {}  # the first step of each side: compilation happens here, untimed
    for name, fn in steps.items():
        start = time.perf_counter()
        first[name] = fn()
        warm[name] = time.perf_counter() - start
    _check_compiled(steps["ensemble"], steps["compiled"], (first["ensemble"], first["compiled"]))
    times = time_calls(steps, number=number, repeat=repeat)
    case = f"E = 4 LoRA seeds (r = 4), batch {batch} × 64, one AdamW step"
    loop_cell = f"{times['loop'].cell(digits=1)} ({1e3 * times['loop'].median / members:.1f})"
    compiled_name = f"Ensemble (native), compiled (first step {warm['compiled']:.0f} s)"
    return [
        [case, "Ensemble (native)", times["ensemble"].cell(digits=1),
         "per-seed loop (per seed-step)", loop_cell,
         ratio_cell(times["loop"], times["ensemble"]), "≥ 1.5×", "—", "—"],
        [case, compiled_name, times["compiled"].cell(digits=1),
         "per-seed loop (per seed-step)", loop_cell,
         ratio_cell(times["loop"], times["compiled"]), "≥ 1.5×", "—", "—"],
        [case, "Ensemble (vmap, native=False)", times["vmap"].cell(digits=1),
         "per-seed loop (per seed-step)", loop_cell,
         ratio_cell(times["loop"], times["vmap"]), "—", "—", "—"],
        [case, compiled_name, times["compiled"].cell(digits=1),
         f"per-seed loop, each model compiled (first step {warm['compiled loop']:.0f} s)",
         times["compiled loop"].cell(digits=1),
         ratio_cell(times["compiled loop"], times["compiled"]), "—", "—", "—"],
    ]  # fmt: skip


def run(*, quick: bool = False, progress=None) -> list[list]:
    n, repeat = (1024, 3) if quick else (4096, 3)
    batches = (1,) if quick else (1, 8, 32)
    task = progress.add_task("lora", total=1 + len(batches)) if progress else None
    rows = [_svd_row(n, repeat)]
    if progress:
        progress.advance(task)
    with deterministic():
        for batch in batches:
            rows += _ensemble_rows(batch, repeat=3 if quick else 5, number=2 if quick else 5)
            if progress:
                progress.advance(task)
    return rows

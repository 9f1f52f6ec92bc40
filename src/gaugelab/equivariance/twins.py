"""The attention-head twin protocol: function-identical Transformers in different head bases.

One optimizer trains an ensemble of members from the same data stream: the *base*, the *gauge
twin* (every head's ``(W_Q, W_K)`` moved by an element of ``head_gauge(config)``), the *identity
twin* (element ``I``: must stay bit-identical to the base) and the *noise twin* (``W_Q, W_K``
perturbed by ``noise_scale``: the floor set by round-off amplification). At each checkpoint every
twin is compared with the base: relative logit distance on validation data, QK drift (per layer
and head, the relative distance of ``W_Q[h] W_K[h]ᵀ``) and OV drift (``W_V[h] W_O[h]``).

Source: singh2026lossbasis, §6 (twin protocol); PROTOCOLS §5 (the reference configuration).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar, Literal

import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field, model_validator

from gaugelab.determinism import deterministic
from gaugelab.models import Ensemble, Transformer, TransformerConfig
from gaugelab.models.symmetry import GaugeElements, apply_gauge, head_gauge
from gaugelab.optim import OPTIMIZERS, make_optimizer, muon_hybrid
from gaugelab.tasks import CharText, ModularArithmetic

TwinKind = Literal["gauge", "identity", "noise"]
HYBRID = "muon-hybrid"
DEFAULT_OPTIMIZERS = ("adam", "heavy-ball", "scalar-adam", HYBRID)
# PROTOCOLS §5: adam 1e-3; heavy-ball μ = 0.9, η = 0.5; scalar-adam 3e-3; muon 0.02 (+ adam 1e-3).
PROTOCOL_HYPER: dict[str, dict[str, float]] = {
    "adam": {"lr": 1e-3},
    "heavy-ball": {"lr": 0.5, "momentum": 0.9},
    "scalar-adam": {"lr": 3e-3},
    HYBRID: {"lr": 0.02, "adam_lr": 1e-3},
}
# The character model (6 layers, d_model 256) diverges under heavy-ball at the modular task's
# η = 0.5 (non-finite by step 20); at 0.1 and 0.03 it stays finite (and, as singh2026lossbasis
# reports for SGD at this depth, near the unigram loss). PROTOCOLS gives no rate for it.
TEXT_HYPER: dict[str, dict[str, float]] = {
    **PROTOCOL_HYPER,
    "heavy-ball": {"lr": 0.03, "momentum": 0.9},
}
BASIS_SENSITIVE, EQUIVARIANT, CHAOTIC, INCONCLUSIVE = (
    "basis-sensitive",
    "equivariant",
    "equivariant-then-chaotic",
    "inconclusive",
)


def twin_optimizers() -> list[str]:
    """The names a twin run accepts: every zoo rule, and ``muon-hybrid``."""
    return [*sorted(OPTIMIZERS), HYBRID]


def twin_model_config(**overrides) -> TransformerConfig:
    """The PROTOCOLS §5 model: 2 pre-RMSNorm blocks, 4 heads × 16, d 64, SiLU MLP 256, no mask.

    RMSNorm is ``x/‖x‖·√d·g`` (no stabiliser), all projections bias-free, no qk-norm, learned
    positions, torch's default layer initialisation; the head reads the last position.
    """
    base = dict(
        n_layers=2, d_model=64, n_heads=4, d_head=16, d_mlp=256, d_vocab=48, d_vocab_out=47,
        n_ctx=3, act_fn="silu", normalization="rmsnorm", norm_eps=0.0, norm_placement="pre",
        positional="learned", causal=False, init_std=None,
    )  # fmt: skip
    return TransformerConfig(**{**base, **overrides})


def text_model_config(d_vocab: int, block_size: int, **overrides) -> TransformerConfig:
    """The stochastic variant's character model: 6 layers, d_model 256, 8 heads × 32, causal."""
    base = dict(
        n_layers=6, d_model=256, n_heads=8, d_head=32, d_mlp=1024, d_vocab=d_vocab,
        n_ctx=block_size, act_fn="silu", normalization="rmsnorm", norm_eps=1e-6,
        positional="learned", causal=True, init_std=0.02,
    )  # fmt: skip
    return TransformerConfig(**{**base, **overrides})


class TwinSpec(BaseModel):
    """One optimizer's twin run (immutable; its JSON is the run's identity).

    Source: singh2026lossbasis, §6; PROTOCOLS §5 (every default).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    kind: ClassVar[str] = "twins"

    model: TransformerConfig = Field(
        default_factory=twin_model_config, description="The Transformer (PROTOCOLS §5 default)."
    )
    task: Literal["modular", "text"] = Field(
        "modular", description="modular: full-batch addition mod `modulus`; text: characters."
    )
    modulus: int = Field(47, ge=2, description="Prime of the modular task.")
    train_fraction: float = Field(0.4, gt=0, lt=1, description="Train share of the pairs.")
    split_seed: int = Field(42, description="Seed of the random train/validation split.")
    text_path: str | None = Field(None, description="UTF-8 text file for task='text'.")
    text_sha256: str | None = Field(
        None, description="sha256 of the text file; part of the identity, checked before training."
    )
    batch_size: int = Field(32, ge=1, description="Minibatch size for task='text'.")
    val_batches: int = Field(4, ge=1, description="Validation batches for task='text'.")
    optimizer: str = Field("adam", description="A zoo rule or 'muon-hybrid'.")
    hyper: dict[str, float | int | bool | str] = Field(
        default_factory=dict, description="Optimizer hyperparameters (PROTOCOLS §5 if empty)."
    )
    twins: tuple[TwinKind, ...] = Field(
        ("gauge", "identity", "noise"), description="Twins trained beside the base."
    )
    noise_scale: float = Field(1e-7, gt=0, description="Noise twin: W_Q, W_K += scale·randn.")
    init_seed: int = Field(42, description="Seed of the base model's initialisation.")
    gauge_seed: int = Field(777, description="Seed of the gauge draw (one element per head).")
    noise_seed: int = Field(888, description="Seed of the noise twin's perturbation.")
    data_seed: int = Field(0, description="Seed of the minibatch stream (task='text').")
    steps: int = Field(1500, ge=1, description="Training steps.")
    checkpoints: tuple[int, ...] = Field(
        (0, 1, 10, 50, 100, 300, 600, 1000, 1500), description="Steps at which to measure."
    )
    dtype: Literal["float32", "float64"] = Field("float32", description="Parameter dtype.")
    compile: bool = Field(
        False,
        description="Train through torch.compile (about 2× faster on CPU after a one-off "
        "compilation; round-off differs from eager, so it is part of the run's identity).",
    )

    @model_validator(mode="after")
    def _check(self) -> TwinSpec:
        if self.optimizer not in twin_optimizers():
            known = ", ".join(twin_optimizers())
            raise ValueError(f"TwinSpec: optimizer={self.optimizer!r}; allowed: {known}")
        if self.task == "text" and not self.text_path:
            raise ValueError("TwinSpec: task='text' needs text_path (a UTF-8 file)")
        if len(set(self.twins)) != len(self.twins):
            raise ValueError(f"TwinSpec: twins={self.twins!r} repeats a kind")
        return self

    def hyperparameters(self) -> dict:
        """``hyper``, or when empty the PROTOCOLS §5 hyperparameters of the optimizer
        (:data:`TEXT_HYPER` for the text task: heavy-ball at η = 0.03)."""
        if self.hyper:
            return dict(self.hyper)
        defaults = TEXT_HYPER if self.task == "text" else PROTOCOL_HYPER
        return dict(defaults.get(self.optimizer, {}))

    def measured_steps(self) -> list[int]:
        """Checkpoint steps within ``[0, steps]``, plus the final step."""
        return sorted({s for s in self.checkpoints if 0 <= s <= self.steps} | {self.steps})


@dataclass
class TwinResult:
    """Measurements of one twin run.

    Attributes:
        spec: the run's spec.
        records: ``step → {metric name: value}``; names are ``"<twin>/logit_distance"``,
            ``"<twin>/qk_drift_mean"``, ``"<twin>/qk_drift_max"``, ``"<twin>/qk_drift/L{l}H{h}"``,
            ``"<twin>/ov_drift_mean"`` and ``"<member>/{train,val}_{loss,accuracy}"`` with member
            ``base`` or a twin kind.
        verdict, explanation: from the gauge and noise twins (see :func:`twin_verdict`).
        members: the trained models in member order (base first), for merging.
    """

    spec: TwinSpec
    records: dict[int, dict[str, float]]
    verdict: str
    explanation: str
    members: list[Transformer] = field(default_factory=list, repr=False)

    def series(self, name: str) -> tuple[list[int], list[float]]:
        """``(steps, values)`` of one metric over the checkpoints."""
        steps = sorted(s for s in self.records if name in self.records[s])
        return steps, [self.records[s][name] for s in steps]


def relative_distance(a: torch.Tensor, b: torch.Tensor, dims: tuple[int, ...] | None = None):
    """``‖a − b‖_F / (½(‖a‖_F + ‖b‖_F) + 1e-12)`` over ``dims`` (all dims by default).

    Source: PROTOCOLS §5 (logit distance and QK drift).
    """
    norm = torch.linalg.vector_norm
    return norm(a - b, dim=dims) / (0.5 * (norm(a, dim=dims) + norm(b, dim=dims)) + 1e-12)


def twin_verdict(gauge: list[float], noise: list[float]) -> tuple[str, str]:
    """Classify from the gauge and noise twins' logit distances at steps ≥ 1 (step 1 first).

    ``basis-sensitive``: gauge ≥ 100 × noise at step 1. ``equivariant-then-chaotic``: gauge
    ≤ 10 × noise at step 1, and both end far above the step-1 floor (≥ 1000 × the noise twin's
    step-1 distance): round-off is amplified, in every basis alike. ``equivariant``: gauge
    ≤ 10 × noise at every step (in float64 an equivariant gauge twin sits far below its noise
    twin, at round-off). Otherwise ``inconclusive``.

    Source: singh2026lossbasis, §6 (reading the triplet).
    """
    if not gauge or len(gauge) != len(noise):
        raise ValueError("twin_verdict: need equally long, non-empty gauge and noise series")
    g1, n1 = gauge[0], max(noise[0], 1e-300)
    if g1 >= 100 * n1:
        return BASIS_SENSITIVE, f"gauge twin {g1:.1e} at step 1, {g1 / n1:.0f}× its noise twin"
    below = [g <= 10 * max(n, 1e-300) for g, n in zip(gauge, noise, strict=True)]
    floor = 1000 * n1
    if below[0] and gauge[-1] >= floor and noise[-1] >= floor:
        return CHAOTIC, (
            f"gauge and noise twins agree at step 1 ({g1:.1e} vs {n1:.1e}) and both end far "
            f"above that floor ({gauge[-1]:.1e} vs {noise[-1]:.1e}): chaotic amplification of "
            f"round-off, not basis dependence"
        )
    if all(below):
        return EQUIVARIANT, f"gauge twin ≤ 10× its noise twin throughout (step 1: {g1:.1e})"
    return INCONCLUSIVE, f"gauge twin {gauge[-1]:.1e} vs noise twin {noise[-1]:.1e} at the end"


class _Data:
    """Training batches and the validation set of a spec, identical for every member."""

    def __init__(self, spec: TwinSpec) -> None:
        self.spec = spec
        if spec.task == "modular":
            task = ModularArithmetic(spec.modulus, train_fraction=spec.train_fraction,
                                     seed=spec.split_seed)  # fmt: skip
            self.train = (task.train_inputs, task.train_labels)
            self.val = (task.val_inputs, task.val_labels)
            self.last_only = True
        else:
            text = CharText(spec.text_path, block_size=spec.model.n_ctx)
            if spec.text_sha256 is not None and text.sha256 != spec.text_sha256:
                raise ValueError(
                    f"TwinSpec: {spec.text_path} has sha256 {text.sha256[:12]}…, the spec "
                    f"expects {spec.text_sha256[:12]}…: the file changed"
                )
            self.stream = text.batches(spec.batch_size, seed=spec.data_seed)
            val = text.batches(spec.batch_size, seed=spec.data_seed + 1, split="val")
            xs, ys = zip(*(next(val) for _ in range(spec.val_batches)), strict=True)
            self.val = (torch.cat(xs), torch.cat(ys))
            self.last_only = False

    def batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.train if self.spec.task == "modular" else next(self.stream)

    def logits(self, out: torch.Tensor) -> torch.Tensor:
        """``[E, B, T, V]`` model output → ``[E, N, V]`` predictions that carry a label."""
        return out[:, :, -1] if self.last_only else out.flatten(1, 2)

    def labels(self, y: torch.Tensor) -> torch.Tensor:
        return y if self.last_only else y.flatten()


def build_members(spec: TwinSpec) -> tuple[list[Transformer], list[str]]:
    """The base model and its twins, in member order (base first), and their names."""
    dtype = getattr(torch, spec.dtype)
    base = Transformer(spec.model, seed=spec.init_seed, dtype=dtype)
    gauge = head_gauge(spec.model)
    members, names = [base], ["base"]
    for kind in spec.twins:
        if kind == "gauge":
            element = gauge.sample(torch.Generator().manual_seed(spec.gauge_seed), dtype)
            twin = apply_gauge(base, GaugeElements(qk=element))
        elif kind == "identity":
            twin = apply_gauge(base, GaugeElements(qk=gauge.identity(dtype)))
        else:
            twin = apply_gauge(base, GaugeElements())
            gen = torch.Generator().manual_seed(spec.noise_seed)
            with torch.no_grad():
                for block in twin.blocks:
                    for proj in (block.attn.q_proj, block.attn.k_proj):
                        noise = torch.randn(proj.weight.shape, generator=gen, dtype=torch.float64)
                        proj.weight.add_(spec.noise_scale * noise.to(dtype))
        members.append(twin)
        names.append(kind)
    return members, names


def _optimizer(spec: TwinSpec, ensemble: Ensemble):
    hyper = spec.hyperparameters()
    if spec.optimizer == HYBRID:
        return muon_hybrid(ensemble.stacked_parameters().items(), member_dims=1, **hyper)
    return make_optimizer(spec.optimizer, list(ensemble.parameters()), member_dims=1, **hyper)


def _head_invariants(ensemble: Ensemble, config: TransformerConfig):
    """QK and OV invariants of every member: two ``[E, L, H, d, d]`` tensors."""
    p = ensemble.stacked_parameters()
    E, H, G, D, d = (
        ensemble.n_members,
        config.n_heads,
        config.kv_heads,
        config.d_head,
        config.d_model,
    )
    qk, ov = [], []
    for layer in range(config.n_layers):
        pre = f"blocks.{layer}.attn."
        Wq = p[pre + "q_proj.weight"].view(E, H, D, d).transpose(-1, -2)  # [E, H, d, D]
        Wk = p[pre + "k_proj.weight"].view(E, G, D, d).transpose(-1, -2)
        Wv = p[pre + "v_proj.weight"].view(E, G, D, d).transpose(-1, -2)
        Wo = p[pre + "o_proj.weight"].view(E, d, H, D).permute(0, 2, 3, 1)  # [E, H, D, d]
        s = config.group_size
        qk.append(Wq @ Wk.repeat_interleave(s, dim=1).mT)
        ov.append(Wv.repeat_interleave(s, dim=1) @ Wo)
    return torch.stack(qk, dim=1), torch.stack(ov, dim=1)


def _measure(ensemble, names, data: _Data, config: TransformerConfig) -> dict[str, float]:
    metrics: dict[str, float] = {}
    with torch.no_grad():
        for split, (x, y) in (("train", data.train if data.last_only else data.val),
                              ("val", data.val)):  # fmt: skip
            if split == "train" and not data.last_only:
                continue  # the text variant's training loss is logged per step
            logits = data.logits(ensemble(x))  # [E, N, V]
            labels = data.labels(y)
            for e, name in enumerate(names):
                metrics[f"{name}/{split}_loss"] = float(F.cross_entropy(logits[e], labels))
                acc = (logits[e].argmax(-1) == labels).double().mean()
                metrics[f"{name}/{split}_accuracy"] = float(acc)
            if split == "val":
                val_logits = logits
        qk, ov = _head_invariants(ensemble, config)
        for e, name in enumerate(names[1:], start=1):
            metrics[f"{name}/logit_distance"] = float(
                relative_distance(val_logits[e], val_logits[0])
            )
            drift = relative_distance(qk[e], qk[0], dims=(-2, -1))  # [L, H]
            metrics[f"{name}/qk_drift_mean"] = float(drift.mean())
            metrics[f"{name}/qk_drift_max"] = float(drift.max())
            for (layer, h), value in zip(
                [(a, b) for a in range(config.n_layers) for b in range(config.n_heads)],
                drift.flatten().tolist(), strict=True,
            ):  # fmt: skip
                metrics[f"{name}/qk_drift/L{layer}H{h}"] = value
            metrics[f"{name}/ov_drift_mean"] = float(
                relative_distance(ov[e], ov[0], dims=(-2, -1)).mean()
            )
    return metrics


def run_twins(
    spec: TwinSpec,
    sink: Callable[[int, dict[str, float]], None] | None = None,
    progress: Callable[[int], None] | None = None,
) -> TwinResult:
    """Train the base and its twins as one ensemble and measure them at every checkpoint.

    Args:
        spec: the run.
        sink: called as ``sink(step, metrics)`` at every checkpoint (e.g. a run store's logger).
        progress: called with the number of steps done after every step.

    Returns:
        A :class:`TwinResult`; its verdict uses the gauge and noise twins when both are present.

    Raises:
        NonFiniteError: a loss or gradient became NaN/inf.
        ValueError: a bad spec (caught by its validation).

    Source: singh2026lossbasis, §6; PROTOCOLS §5.
    """
    with deterministic():
        data = _Data(spec)
        members, names = build_members(spec)
        ensemble = Ensemble(members, compile=spec.compile)
        optimizer = _optimizer(spec, ensemble)
        checkpoints = spec.measured_steps()
        records: dict[int, dict[str, float]] = {}
        E = ensemble.n_members

        def record(step: int, extra: dict[str, float] | None = None) -> None:
            metrics = _measure(ensemble, names, data, spec.model)
            metrics.update(extra or {})
            records[step] = metrics
            if sink is not None:
                sink(step, metrics)

        if 0 in checkpoints:
            record(0)
        for step in range(1, spec.steps + 1):
            x, y = data.batch()
            optimizer.zero_grad()
            logits = data.logits(ensemble(x))  # [E, N, V]
            losses = (
                F.cross_entropy(logits.flatten(0, 1), data.labels(y).repeat(E), reduction="none")
                .view(E, -1)
                .mean(dim=1)
            )  # [E]: members never interact
            losses.sum().backward()
            optimizer.step()
            if progress is not None:
                progress(step)
            if step in checkpoints:
                extra = {
                    f"{n}/batch_loss": float(v) for n, v in zip(names, losses.detach(), strict=True)
                }
                record(step, extra)
        verdict, why = INCONCLUSIVE, "needs both a gauge and a noise twin"
        measured = [s for s in checkpoints if s >= 1]
        if "gauge" in names and "noise" in names and measured:
            gauge = [records[s]["gauge/logit_distance"] for s in measured]
            noise = [records[s]["noise/logit_distance"] for s in measured]
            verdict, why = twin_verdict(gauge, noise)
        trained = [ensemble.member(e) for e in range(E)]
        return TwinResult(spec, records, verdict, why, trained)


__all__ = [
    "BASIS_SENSITIVE",
    "CHAOTIC",
    "DEFAULT_OPTIMIZERS",
    "EQUIVARIANT",
    "HYBRID",
    "INCONCLUSIVE",
    "PROTOCOL_HYPER",
    "TEXT_HYPER",
    "TwinResult",
    "TwinSpec",
    "build_members",
    "relative_distance",
    "run_twins",
    "text_model_config",
    "twin_model_config",
    "twin_optimizers",
    "twin_verdict",
]

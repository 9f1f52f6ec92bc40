"""The twin-triplet engine for Transformers: function-identical members, trained together.

One optimizer trains an ensemble of members from the same data stream: the *base*, the *gauge
twin* (every head's ``(W_Q, W_K)`` moved by an element of ``head_gauge(config)``, drawn as the
reference scripts draw it by default: :func:`gauge_elements`), the *identity twin* (element
``I``: must stay bit-identical to the base) and the *noise twin* (``W_Q, W_K`` perturbed by
``noise_scale``: the floor set by round-off amplification; :func:`perturb_qk`). At each
checkpoint every twin is compared with the base: relative logit distance on validation data,
QK drift (per layer and head, the relative distance of ``W_Q[h] W_K[h]ᵀ``) and OV drift
(``W_V[h] W_O[h]``).

This module is the engine: which twins, how they are measured, how the triplet is read. The
protocol (model, data, optimizer hyperparameters) is :mod:`gaugelab.experiments.twins.run`.

Source: singh2026lossbasis, §6 (twin protocol); docs/protocols.md §5.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import torch
import torch.nn.functional as F

from gaugelab.equivariance.distance import relative_distance
from gaugelab.equivariance.verdicts import (
    triplet_verdict,
    twin_verdict,
)
from gaugelab.gauge import Orthogonal
from gaugelab.linalg.random import qr_orthogonal
from gaugelab.models import Ensemble, Transformer, TransformerConfig
from gaugelab.models.heads import ov_invariants, qk_invariants
from gaugelab.models.symmetry import GaugeElements, HeadGauge, apply_gauge, head_gauge

TwinKind = Literal["gauge", "identity", "noise"]
Invariants = Callable[[Mapping[str, torch.Tensor]], tuple[torch.Tensor, torch.Tensor]]
"""Stacked parameters → every member's (QK, OV) head invariants ``[E, L, H, d, d]``."""
GaugeDraw = Literal["reference", "haar"]
GAUGE_DRAWS: tuple[GaugeDraw, ...] = ("reference", "haar")


class TwinData(Protocol):
    """What the engine needs from a task: batches, validation data, the labelled positions.

    ``train`` is the full training set (full-batch tasks) or ``None``; ``val`` the validation
    inputs ``[N, T]`` and labels; ``batch()`` the next training batch (the same for every
    member); ``skip(n)`` consumes ``n`` batches (a resumed run continues the stream where the
    interrupted one stopped); ``logits``/``labels`` pick the predictions that carry a label.
    """

    train: tuple[torch.Tensor, torch.Tensor] | None
    val: tuple[torch.Tensor, torch.Tensor]

    def batch(self) -> tuple[torch.Tensor, torch.Tensor]: ...

    def skip(self, n: int) -> None: ...

    def logits(self, out: torch.Tensor) -> torch.Tensor: ...

    def labels(self, y: torch.Tensor) -> torch.Tensor: ...


@dataclass
class TwinResult:
    """Measurements of one twin run.

    Attributes:
        records: ``step → {metric name: value}``; names are ``"<twin>/logit_distance"``,
            ``"<twin>/qk_drift_mean"``, ``"<twin>/qk_drift_max"``, ``"<twin>/qk_drift/L{l}H{h}"``,
            ``"<twin>/ov_drift_mean"`` and ``"<member>/{train,val}_{loss,accuracy}"`` with member
            ``base`` or a twin kind.
        verdict, explanation: from the triplet (see :func:`twin_verdict`).
        members: the trained models in member order (base first), for merging.
        spec: the protocol's spec of the run, when the protocol built it.
    """

    records: dict[int, dict[str, float]]
    verdict: str
    explanation: str
    members: list[Transformer] = field(default_factory=list, repr=False)
    spec: Any = None

    def series(self, name: str) -> tuple[list[int], list[float]]:
        """``(steps, values)`` of one metric over the checkpoints."""
        steps = sorted(s for s in self.records if name in self.records[s])
        return steps, [self.records[s][name] for s in steps]


def gauge_elements(
    config: TransformerConfig,
    *,
    seed: int,
    dtype: torch.dtype,
    draw: GaugeDraw = "reference",
    gauge: HeadGauge | None = None,
) -> torch.Tensor:
    """The gauge twin's head elements: one per layer and key/value group, drawn in sequence.

    One generator seeded ``seed`` draws the elements layer by layer, and within a layer key/value
    group by group (head by head without grouped-query attention).

    ``draw="reference"`` (the protocol's, docs/protocols.md §5): for an ``O(d_head)`` head gauge,
    ``Q = torch.linalg.qr(Z)[0]`` of a float32 ``Z = randn(d_head, d_head)`` with no sign fix
    (:func:`gaugelab.linalg.random.qr_orthogonal`; ``Z`` is cast to ``dtype`` before the QR,
    so in float32 ``Q`` is the reference scripts' matrix bit for bit and in float64 it is the
    same draw, orthogonal to float64 round-off), and the element is ``A = Qᵀ``: the reference
    multiplies head ``h``'s rows of the ``nn.Linear`` weights ``[out, in]`` by ``Q`` on the
    left, which is ``W_Q[h] ↦ W_Q[h] Qᵀ`` in the right-multiplied layout used here. A head
    gauge that is not ``O(d_head)`` (RoPE's torus, qk-norm's signed permutations), which the
    reference never drew, is sampled from its own group in ``dtype``.

    ``draw="haar"``: the group's own sample (``HeadGauge.sample``; for ``O(d_head)`` the
    sign-fixed, Haar-distributed QR factor) in ``dtype``.

    Args:
        config: the architecture (its :func:`gaugelab.models.symmetry.head_gauge`).
        seed: seeds the one generator of the draw.
        dtype: real floating dtype of the elements (the model's).
        draw: ``"reference"`` or ``"haar"``.
        gauge: the head gauge to draw from; ``None``: ``head_gauge(config)`` (a Hugging Face
            model passes :func:`gaugelab.models.hf_symmetry.hf_head_gauge`).

    Returns:
        ``[n_layers, n_key_value_heads, d_head, d_head]`` elements of the gauge.

    Raises:
        ValueError: ``draw`` is neither ``"reference"`` nor ``"haar"``.

    Source: singh2026lossbasis, §6 (the gauge twin); docs/protocols.md §5.
    """
    _check_draw(draw)
    gauge = head_gauge(config) if gauge is None else gauge
    generator = torch.Generator().manual_seed(seed)
    if draw == "haar":
        return gauge.sample(generator, dtype)

    def element(group) -> torch.Tensor:
        if type(group) is not Orthogonal:
            return group.sample(generator, dtype)
        Q = qr_orthogonal(group.k, generator=generator, dtype=dtype, draw_dtype=torch.float32)
        return Q.mT  # the reference's Q acts on the weight rows: W_Q[h] ↦ W_Q[h] Qᵀ

    return torch.stack([torch.stack([element(G) for G in row]) for row in gauge.groups])


def perturb_qk(model: Transformer, *, seed: int, scale: float, draw: GaugeDraw = "reference"):
    """The noise twin's perturbation, in place: ``W_Q, W_K += scale · randn`` per block.

    One generator seeded ``seed`` draws, block by block, the query weight's noise and then the
    key weight's (each ``[n_heads·d_head, d_model]`` or ``[n_kv_heads·d_head, d_model]``, the
    ``nn.Linear`` layout). ``draw="reference"`` draws in float32 as the reference scripts do
    (cast to the model's dtype, then scaled: in float32 exactly their ``W += scale · randn``);
    ``draw="haar"`` draws in float64 (gaugelab's earlier convention).

    Args:
        model: the twin to perturb (modified in place).
        seed: seeds the generator.
        scale: the perturbation's scale (the protocol: 1e-7).
        draw: ``"reference"`` or ``"haar"`` (see :func:`gauge_elements`).

    Raises:
        ValueError: ``draw`` is neither ``"reference"`` nor ``"haar"``.

    Source: singh2026lossbasis, §6 (the noise twin); docs/protocols.md §5.
    """
    _check_draw(draw)
    dtype = model.embed.weight.dtype
    noise_dtype = torch.float32 if draw == "reference" else torch.float64
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for block in model.blocks:
            for proj in (block.attn.q_proj, block.attn.k_proj):
                noise = torch.randn(proj.weight.shape, generator=generator, dtype=noise_dtype)
                proj.weight.add_(scale * noise.to(dtype))


def _check_draw(draw: object) -> None:
    if draw not in GAUGE_DRAWS:
        raise ValueError(f"gauge_draw={draw!r}; allowed: {', '.join(GAUGE_DRAWS)}")


def make_twins(
    base: Transformer,
    kinds: Sequence[TwinKind],
    *,
    gauge_seed: int,
    noise_seed: int,
    noise_scale: float,
    gauge_draw: GaugeDraw = "reference",
) -> tuple[list[Transformer], list[str]]:
    """The base model and its twins, in member order (base first), and their names.

    Args:
        base: the model; its parameters' dtype is the twins' dtype.
        kinds: the twins to build, e.g. ``("gauge", "identity", "noise")``.
        gauge_seed: seeds the gauge draw (:func:`gauge_elements`: one element of
            ``head_gauge`` per layer and key/value group, in that order).
        noise_seed, noise_scale: the noise twin's ``W_Q, W_K += scale · randn``
            (:func:`perturb_qk`).
        gauge_draw: ``"reference"`` (the protocol's: the reference scripts' unsigned QR
            factor, float32 draws) or ``"haar"`` (sign-fixed Haar elements, float64 noise).

    Raises:
        ValueError: an unknown ``gauge_draw``.

    Source: singh2026lossbasis, §6; docs/protocols.md §5 (the twins' construction).
    """
    _check_draw(gauge_draw)
    dtype = base.embed.weight.dtype
    members, names = [base], ["base"]
    for kind in kinds:
        if kind == "gauge":
            element = gauge_elements(base.config, seed=gauge_seed, dtype=dtype, draw=gauge_draw)
            twin = apply_gauge(base, GaugeElements(qk=element))
        elif kind == "identity":
            twin = apply_gauge(base, GaugeElements(qk=head_gauge(base.config).identity(dtype)))
        else:
            twin = apply_gauge(base, GaugeElements())
            perturb_qk(twin, seed=noise_seed, scale=noise_scale, draw=gauge_draw)
        members.append(twin)
        names.append(kind)
    return members, names


def measure_twins(
    ensemble: Ensemble,
    names: Sequence[str],
    data: TwinData,
    config: TransformerConfig | None,
    *,
    invariants: Invariants | None = None,
) -> dict[str, float]:
    """Every member's loss and accuracy, and every twin's distances to the base.

    Args:
        ensemble, names: the members and their names (base first).
        data: the task.
        config: the members' architecture (read when ``invariants`` is None).
        invariants: ``params → (qk, ov)``, each ``[E, L, H, d_model, d_model]``, from the
            ensemble's stacked parameters; ``None``: :func:`~gaugelab.models.heads.qk_invariants`
            and :func:`~gaugelab.models.heads.ov_invariants` of ``config``.

    Returns:
        metric name → value (see :class:`TwinResult` for the names); distances are relative
        Frobenius distances (:func:`gaugelab.equivariance.distance.relative_distance`).
    """
    metrics: dict[str, float] = {}
    with torch.no_grad():
        splits = [("val", data.val)] if data.train is None else [("train", data.train),
                                                                   ("val", data.val)]  # fmt: skip
        for split, (x, y) in splits:
            logits = data.logits(ensemble(x))  # [E, N, V]
            labels = data.labels(y)
            for e, name in enumerate(names):
                metrics[f"{name}/{split}_loss"] = float(F.cross_entropy(logits[e], labels))
                acc = (logits[e].argmax(-1) == labels).double().mean()
                metrics[f"{name}/{split}_accuracy"] = float(acc)
        val_logits = logits
        params = ensemble.stacked_parameters()
        if invariants is None:
            qk, ov = qk_invariants(params, config), ov_invariants(params, config)
        else:
            qk, ov = invariants(params)  # [E, L, H, d, d]
        heads = [(a, b) for a in range(qk.shape[1]) for b in range(qk.shape[2])]
        for e, name in enumerate(names[1:], start=1):
            metrics[f"{name}/logit_distance"] = float(
                relative_distance(val_logits[e], val_logits[0])
            )
            drift = relative_distance(qk[e], qk[0], dims=(-2, -1))  # [L, H]
            metrics[f"{name}/qk_drift_mean"] = float(drift.mean())
            metrics[f"{name}/qk_drift_max"] = float(drift.max())
            for (layer, h), value in zip(heads, drift.flatten().tolist(), strict=True):
                metrics[f"{name}/qk_drift/L{layer}H{h}"] = value
            metrics[f"{name}/ov_drift_mean"] = float(
                relative_distance(ov[e], ov[0], dims=(-2, -1)).mean()
            )
    return metrics


__all__ = [
    "GAUGE_DRAWS",
    "GaugeDraw",
    "Invariants",
    "TwinData",
    "TwinKind",
    "TwinResult",
    "gauge_elements",
    "make_twins",
    "measure_twins",
    "perturb_qk",
    "triplet_verdict",
    "twin_verdict",
]

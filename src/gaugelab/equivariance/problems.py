"""Problems the equivariance check runs on: a factored matrix objective and a small Transformer.

A problem gives initial parameters (a list of tensors), a loss, the gauge-invariant
*represented* objects to compare (by :func:`gaugelab.equivariance.distance.relative_distance`),
the gauge action on the parameters, and its inverse (to align a twin back to the base basis).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch.func import functional_call

from gaugelab.equivariance.distance import relative_distance
from gaugelab.equivariance.param_groups import FactorPair
from gaugelab.gauge import Group, act, represented
from gaugelab.models import Transformer, TransformerConfig, qk_invariants
from gaugelab.models.symmetry import GaugeElements, apply_gauge
from gaugelab.tasks import ModularArithmetic, factor_init, make_sensing

PROBLEMS = ("sensing", "quadratic", "attention")

# docs/protocols.md §2: n = 6, k = 3, planted rank 2, m = 20, factor scale 0.3.
_N, _K, _RANK, _M, _SCALE = 6, 3, 2, 20, 0.3


@dataclass
class FactorProblem:
    """``f(U Vᵀ)`` with ``U [6, 3]``, ``V [6, 3]``: sensing (docs/protocols.md §2) or a quadratic.

    The represented object is ``W = U Vᵀ``; an element ``A [3, 3]`` acts by ``(U A, V A⁻ᵀ)``.
    ``pairs``: the factor pair ``(U, V)``, the gauge acting on their columns
    (:class:`gaugelab.equivariance.param_groups.FactorPair`).
    """

    kind: str
    dtype: torch.dtype
    seed: int
    k: int = _K

    def __post_init__(self) -> None:
        self._sensing = make_sensing(_N, _RANK, _M, seed=self.seed, dtype=self.dtype)
        self.pairs = (FactorPair(0, 1, -1, -1),)  # U A, V A⁻ᵀ: the gauge acts on the columns

    def initial(self) -> list[torch.Tensor]:
        U, V = factor_init(_N, _K, seed=self.seed + 7, scale=_SCALE, dtype=self.dtype)
        return [U, V]

    def loss(self, params: list[torch.Tensor]) -> torch.Tensor:
        W = represented(*params)
        if self.kind == "sensing":
            return self._sensing.loss(W)
        return 0.5 * ((W - self._sensing.target) ** 2).sum()

    def distance(self, params: list[torch.Tensor], base: list[torch.Tensor]) -> float:
        return float(relative_distance(represented(*params), represented(*base)))

    def sample(self, group: Group, generator: torch.Generator) -> torch.Tensor:
        return group.sample(generator, self.dtype)

    def identity(self) -> torch.Tensor:
        return torch.eye(self.k, dtype=self.dtype)

    def transform(self, params: list[torch.Tensor], element: torch.Tensor) -> list[torch.Tensor]:
        return list(act(*params, element))

    def align(self, params: list[torch.Tensor], element: torch.Tensor) -> list[torch.Tensor]:
        U, V = params
        return [U @ torch.linalg.inv(element), V @ element.mT]


@dataclass
class AttentionProblem:
    """A one-layer Transformer on addition mod 7, full batch, with its head gauge.

    Two heads of width 4, d_model 16, learned positions, no normalization and no biases (so
    every parameter is a matrix and any rule, Muon included, applies to all of them). The
    represented objects are the logits on all 49 equations and every head's QK invariant
    ``W_Q[h] W_K[h]ᵀ`` (:func:`gaugelab.models.qk_invariants`); the distance is the larger of
    their relative distances. An element ``[n_layers, n_heads, 4, 4]`` acts by
    ``W_Q[h] ↦ W_Q[h] A_h``, ``W_K[h] ↦ W_K[h] A_h⁻ᵀ``. ``pairs``: each layer's
    ``(q_proj, k_proj)`` weights ``[n_heads·4, 16]``, the gauge acting on their rows.

    Source: singh2026lossbasis, §6 (attention-head gauge).
    """

    dtype: torch.dtype
    seed: int
    config: TransformerConfig = field(
        default_factory=lambda: TransformerConfig(
            n_layers=1, d_model=16, n_heads=2, d_head=4, d_mlp=32, d_vocab=8, d_vocab_out=7,
            n_ctx=3, normalization="none", positional="learned", causal=False, init_std=0.3,
        )
    )  # fmt: skip

    def __post_init__(self) -> None:
        self.k = self.config.d_head
        self.model = Transformer(self.config, seed=self.seed, dtype=self.dtype)
        self.names = [n for n, _ in self.model.named_parameters()]
        self.pairs = tuple(  # W_Q [h·d, d_model], W_K alike: the head gauge acts on the rows
            FactorPair(self.names.index(q), self.names.index(q.replace("q_proj", "k_proj")), 0, 0)
            for q in self.names if q.endswith("attn.q_proj.weight")
        )  # fmt: skip
        task = ModularArithmetic(p=7, train_fraction=0.5, seed=self.seed)
        self.tokens, self.labels = task.inputs, task.labels

    def _params(self, params: list[torch.Tensor]) -> dict[str, torch.Tensor]:
        return dict(zip(self.names, params, strict=True))

    def initial(self) -> list[torch.Tensor]:
        return [p.detach().clone() for p in self.model.parameters()]

    def logits(self, params: list[torch.Tensor]) -> torch.Tensor:
        out = functional_call(self.model, self._params(params), (self.tokens,))
        return out[:, -1]  # [49, 7]: the answer is read at the last position

    def loss(self, params: list[torch.Tensor]) -> torch.Tensor:
        return F.cross_entropy(self.logits(params), self.labels)

    def _with(self, params: list[torch.Tensor]) -> Transformer:
        with torch.no_grad():
            for p, value in zip(self.model.parameters(), params, strict=True):
                p.copy_(value)
        return self.model

    def _qk(self, params: list[torch.Tensor]) -> torch.Tensor:
        return qk_invariants(self._params(params), self.config)  # [L, H, d, d]

    def distance(self, params: list[torch.Tensor], base: list[torch.Tensor]) -> float:
        with torch.no_grad():
            logits = relative_distance(self.logits(params), self.logits(base))
            qk = relative_distance(self._qk(params), self._qk(base))
        return float(max(logits, qk))

    def sample(self, group: Group, generator: torch.Generator) -> torch.Tensor:
        c = self.config
        return group.sample(generator, self.dtype, batch=(c.n_layers, c.kv_heads))

    def identity(self) -> torch.Tensor:
        c = self.config
        return torch.eye(c.d_head, dtype=self.dtype).expand(c.n_layers, c.kv_heads, -1, -1)

    def transform(self, params: list[torch.Tensor], element: torch.Tensor) -> list[torch.Tensor]:
        twin = apply_gauge(self._with(params), GaugeElements(qk=element))
        return [p.detach().clone() for p in twin.parameters()]

    def align(self, params: list[torch.Tensor], element: torch.Tensor) -> list[torch.Tensor]:
        return self.transform(params, torch.linalg.inv(element))


def make_problem(problem: str, dtype: torch.dtype, seed: int) -> FactorProblem | AttentionProblem:
    """Build a check problem by name.

    Raises:
        ValueError: unknown ``problem``.
    """
    if problem in ("sensing", "quadratic"):
        return FactorProblem(problem, dtype, seed)
    if problem == "attention":
        return AttentionProblem(dtype, seed)
    raise ValueError(f"check_equivariance: problem={problem!r}; allowed: {', '.join(PROBLEMS)}")

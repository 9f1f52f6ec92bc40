"""The declared objects of a kernel diagnostic: stacked outputs, trained parameters, metric.

:class:`StackedOutputs` freezes the function side of seed 003 §0x09A: a probe set of ``N``
examples, an output selector giving ``C`` outputs per example, the order (example then
output: ``F[i·C + c] = f_c(x_i)``), dropout off (every call runs the model in eval mode), and
the parameter set the protocol trains (all other parameters and buffers are held fixed).
``F(θ)`` is evaluated with :func:`torch.func.functional_call`, so ``θ`` is a name → tensor
mapping and the model itself is never modified.

Forward-mode AD (the JVPs of §0x09K) is not implemented for every operator (torch's fused
CPU attention kernel has none). The first Jacobian-vector product chooses how JVPs are taken
and records it in :attr:`StackedOutputs.forward_mode`: ``"jvp"`` (forward mode), ``"plain
attention"`` (modules with a ``use_sdpa`` switch, as :class:`gaugelab.models.Transformer`'s
attention, run their plain-ops path for every evaluation from then on, F included, so F and
its tangents come from the same computation), or ``"double vjp"`` (``J v`` as the VJP of the
linear map ``u ↦ Jᵀu``, reverse mode only). :attr:`StackedOutputs.fallback` says why.

:class:`Metric` is the optimizer metric ``M`` of ``K_M = J M Jᵀ`` (§0x09A, §0x09H): the
identity (plain SGD) or a diagonal preconditioner (Adam's ``1/(√v̂_t + ε)`` at step ``t``,
:func:`adam_metric`).

Source: seed 003 §0x09A (declared axes), §0x09H (optimizer metric), §0x09K (estimators).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.func import functional_call, jvp, vjp

Params = dict[str, torch.Tensor]

ORDER = "example_then_output"
"""The stacking order of every :class:`StackedOutputs`: ``F[i·C + c] = f_c(x_i)``."""
FORWARD_MODES = ("jvp", "plain attention", "double vjp")
"""How :meth:`StackedOutputs.jvp` takes Jacobian-vector products (see the module docstring)."""


def last_position(out: torch.Tensor) -> torch.Tensor:
    """The default output selector: ``[N, T, V]`` logits → the last position ``[N, V]``;
    ``[N, C]`` outputs are kept."""
    return out[:, -1] if out.dim() == 3 else out


def column_major(t: torch.Tensor, lead: int = 0) -> torch.Tensor:
    """``[*t.shape[:lead], K]``: the trailing dims of ``t`` flattened column-major (first index
    fastest; for a matrix ``M`` ``[m, n]`` this is ``vec(M)[i + m·j] = M[i, j]``, seed 003
    §0x09D), the first ``lead`` dims kept."""
    dims = (*range(lead), *reversed(range(lead, t.dim())))
    return t.permute(dims).reshape(*t.shape[:lead], -1)


def flatten(theta: Mapping[str, torch.Tensor], names: Sequence[str]) -> torch.Tensor:
    """``[P]``: the tensors of ``names`` in that order, each flattened column-major
    (:func:`column_major`) — the column order of every Jacobian here; for LoRA factors
    declared as ``[B, A]`` it is the seed's ``[vec(B); vec(A)]`` (§0x09D–E)."""
    return torch.cat([column_major(theta[n]) for n in names])


def unflatten(vector: torch.Tensor, like: Mapping[str, torch.Tensor]) -> Params:
    """The inverse of :func:`flatten` for tensors shaped as ``like`` (its key order)."""
    out, start = {}, 0
    for name, ref in like.items():
        chunk = vector[start : start + ref.numel()]
        reverse = tuple(reversed(range(ref.dim())))
        out[name] = chunk.reshape(tuple(ref.shape[d] for d in reverse)).permute(reverse)
        start += ref.numel()
    if start != vector.numel():
        raise ValueError(f"unflatten: vector has {vector.numel()} entries; allowed: {start}")
    return out


class StackedOutputs:
    """``F(θ) ∈ R^{N·C}``: a model's selected outputs on a frozen probe set, stacked.

    Args:
        model: any ``nn.Module``; called as ``model(inputs)`` in eval mode (dropout off).
        inputs: the probe set, a tensor whose first dim is the ``N`` examples.
        select: ``model output → [N, C]`` (default :func:`last_position`).
        selector: the selector's declared name (recorded with every result).
        parameters: the trained parameter set: names of ``model.named_parameters()`` (default:
            those with ``requires_grad``), in the column order of ``J``.
        chunk_size: examples per evaluation (bounds activation memory; ``None``: all at once).
            Chunks are concatenated in example order, so ``F`` is the same.

    Attributes:
        names: the trained parameters' names; shapes: their shapes; n_parameters: ``P``.
        n_examples ``N``, n_outputs ``C``, order :data:`ORDER`, dropout ``False``.
        forward_mode: one of :data:`FORWARD_MODES` (``None`` until the first JVP);
        fallback: why forward mode was not used (``""`` when it was).

    Raises:
        ValueError: unknown or duplicate parameter names, none trained, an empty probe set,
            a selector that does not return ``[N, C]``, a bad ``chunk_size``.

    Source: seed 003 §0x09A, §0x09K (``freeze_probe_split``: dropout off, example then output).
    """

    order = ORDER
    dropout = False

    def __init__(
        self,
        model: nn.Module,
        inputs: torch.Tensor,
        *,
        select: Callable[[torch.Tensor], torch.Tensor] = last_position,
        selector: str = "last-position outputs",
        parameters: Sequence[str] | None = None,
        chunk_size: int | None = None,
    ) -> None:
        named = dict(model.named_parameters())
        if parameters is None:
            names = [n for n, p in named.items() if p.requires_grad]
        else:
            names = list(parameters)
            unknown = [n for n in names if n not in named]
            if unknown:
                raise ValueError(
                    f"StackedOutputs: parameters {unknown} are not parameters of the model; "
                    f"allowed: names of model.named_parameters() ({', '.join(list(named)[:6])}…)"
                )
            if len(set(names)) != len(names):
                raise ValueError(f"StackedOutputs: parameters={names} repeats a name")
        if not names:
            raise ValueError("StackedOutputs: no trained parameters; allowed: at least one")
        if inputs.dim() == 0 or inputs.shape[0] == 0:
            raise ValueError(
                f"StackedOutputs: inputs shape {tuple(inputs.shape)}; allowed: N >= 1 examples"
            )
        if chunk_size is not None and chunk_size < 1:
            raise ValueError(f"StackedOutputs: chunk_size={chunk_size}; allowed: >= 1 or None")
        self.model, self.inputs, self.select, self.selector = model, inputs, select, selector
        self.names = names
        self.chunk_size = chunk_size
        self.fixed: Params = {n: p.detach() for n, p in named.items() if n not in set(names)}
        self.fixed.update(dict(model.named_buffers()))
        self.shapes = {n: tuple(named[n].shape) for n in names}
        self.n_parameters = sum(math.prod(s) for s in self.shapes.values())
        self.n_examples = int(inputs.shape[0])
        self.forward_mode: str | None = None
        self.fallback = ""
        with torch.no_grad():
            probe = self._raw(self.theta(), inputs[:1])
        if probe.dim() != 2 or probe.shape[0] != 1:
            raise ValueError(
                f"StackedOutputs: select returned shape {tuple(probe.shape)} for one example; "
                "allowed: [N, C]"
            )
        self.n_outputs = int(probe.shape[1])

    def theta(self) -> Params:
        """The model's current values of the trained parameters (detached copies)."""
        named = dict(self.model.named_parameters())
        return {n: named[n].detach().clone() for n in self.names}

    @property
    def size(self) -> int:
        """``N·C``."""
        return self.n_examples * self.n_outputs

    def axes(self) -> dict[str, object]:
        """The declared axes (JSON-able): examples, outputs, selector, order, dropout,
        parameters, forward mode and fallback."""
        return {"n_examples": self.n_examples, "n_outputs": self.n_outputs,
                "selector": self.selector, "order": self.order, "dropout": self.dropout,
                "parameters": list(self.names), "n_parameters": self.n_parameters,
                "forward_mode": self.forward_mode, "fallback": self.fallback}  # fmt: skip

    @contextlib.contextmanager
    def _evaluation(self) -> Iterator[None]:
        """Eval mode (dropout off) and, in plain-attention mode, ``use_sdpa=False``."""
        training = self.model.training
        switched = []
        if self.forward_mode == "plain attention":
            for module in self.model.modules():
                if getattr(module, "use_sdpa", False):
                    module.use_sdpa = False
                    switched.append(module)
        self.model.eval()
        try:
            yield
        finally:
            self.model.train(training)
            for module in switched:
                del module.use_sdpa  # back to the class attribute

    def _raw(self, theta: Mapping[str, torch.Tensor], inputs: torch.Tensor) -> torch.Tensor:
        with self._evaluation():
            out = functional_call(self.model, {**self.fixed, **theta}, (inputs,))
        return self.select(out)

    def _chunks(self) -> list[torch.Tensor]:
        n = self.chunk_size or self.n_examples
        return [self.inputs[i : i + n] for i in range(0, self.n_examples, n)]

    def __call__(self, theta: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """``F(θ)`` ``[N·C]`` in the parameters' dtype (differentiable in ``θ``)."""
        return torch.cat([self._raw(theta, x).reshape(-1) for x in self._chunks()])

    def vjp(self, theta: Mapping[str, torch.Tensor], z: torch.Tensor) -> Params:
        """``J(θ)ᵀ z`` for ``z`` ``[N·C]``, by reverse mode, chunk by chunk."""
        self._check_output(z, "vjp")
        total: Params | None = None
        start = 0
        for x in self._chunks():
            _, pull = vjp(lambda t, x=x: self._raw(t, x).reshape(-1), dict(theta))
            n = x.shape[0] * self.n_outputs
            (part,) = pull(z[start : start + n])
            start += n
            total = part if total is None else {k: total[k] + part[k] for k in total}
        assert total is not None
        return total

    def jvp(
        self, theta: Mapping[str, torch.Tensor], tangent: Mapping[str, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(F(θ), J(θ) v)`` ``[N·C]`` each, for a tangent ``v`` shaped as ``θ``.

        The first call chooses the forward mode (see the module docstring).
        """
        if self.forward_mode is None:
            self._choose_forward_mode(theta, tangent)
        values, tangents = [], []
        for x in self._chunks():
            f, t = self._jvp_chunk(theta, tangent, x)
            values.append(f)
            tangents.append(t)
        return torch.cat(values), torch.cat(tangents)

    def _jvp_chunk(self, theta, tangent, x):
        fn = lambda t: self._raw(t, x).reshape(-1)  # noqa: E731
        if self.forward_mode == "double vjp":
            value, pull = vjp(fn, dict(theta))
            u = torch.zeros_like(value)
            _, pull_back = vjp(lambda w: pull(w)[0], u)
            (jv,) = pull_back(dict(tangent))
            return value.detach(), jv
        value, jv = jvp(fn, (dict(theta),), (dict(tangent),))
        return value, jv

    def _choose_forward_mode(self, theta, tangent) -> None:
        x = self.inputs[:1]
        for mode in FORWARD_MODES:
            self.forward_mode = mode
            if mode == "plain attention" and not any(
                getattr(m, "use_sdpa", False) for m in self.model.modules()
            ):
                continue
            try:
                self._jvp_chunk(theta, tangent, x)
            except (NotImplementedError, RuntimeError) as exc:
                reason = str(exc).splitlines()[0][:160]
                self.fallback += f"{mode}: {type(exc).__name__}: {reason}; "
                continue
            self.fallback = self.fallback.rstrip("; ")
            return
        raise RuntimeError(f"StackedOutputs: no way to take a JVP of this model ({self.fallback})")

    def _check_output(self, z: torch.Tensor, what: str) -> None:
        if z.shape != (self.size,):
            raise ValueError(
                f"StackedOutputs.{what}: vector shape {tuple(z.shape)}; allowed: [{self.size}]"
                " (N·C)"
            )


@dataclass(frozen=True)
class Metric:
    """A fixed symmetric PSD parameter metric ``M`` (diagonal), applied to tangents.

    Attributes:
        name: the declared metric (``identity``: plain SGD; ``adam step t``: Adam's).
        diagonal: name → the diagonal of ``M`` shaped as the parameter (empty: identity).
        approximation: what the metric stands for, in words (recorded with results).

    Source: seed 003 §0x09A (``K_M = J M Jᵀ``), §0x09H, §0x09K (``J_t M_t J_tᵀ z``).
    """

    name: str
    diagonal: Mapping[str, torch.Tensor] = field(default_factory=dict)
    approximation: str = ""

    @classmethod
    def identity(cls) -> Metric:
        """``M = I``: the plain-SGD (Euclidean) metric."""
        return cls("identity", {}, "plain SGD: M = I")

    @property
    def is_identity(self) -> bool:
        return not self.diagonal

    def apply(self, tangent: Mapping[str, torch.Tensor]) -> Params:
        """``M v`` for a tangent shaped as the parameters."""
        if self.is_identity:
            return dict(tangent)
        missing = sorted(set(tangent) - set(self.diagonal))
        if missing:
            raise ValueError(f"Metric.apply: metric {self.name!r} has no diagonal for {missing}")
        return {k: v * self.diagonal[k] for k, v in tangent.items()}

    def flat(self, names: Sequence[str], n_parameters: int) -> torch.Tensor | None:
        """``[P]`` the diagonal in :func:`flatten` order, or ``None`` for the identity."""
        if self.is_identity:
            return None
        vector = flatten(self.diagonal, names)
        if vector.numel() != n_parameters:
            raise ValueError(f"Metric.flat: {vector.numel()} entries; allowed: {n_parameters}")
        return vector


def adam_metric(optimizer: torch.optim.Optimizer, parameters: Mapping[str, torch.Tensor]) -> Metric:
    """Adam's preconditioner at its current step as a diagonal metric:
    ``M_t = diag(1/(√v̂_t + ε))`` with ``v̂_t = v_t/(1 − β₂^t)``.

    This is a declared approximation (seed 003 §0x09K): it freezes the second moment at step
    ``t``, drops the momentum average and the learning rate (a common scale, which ``D_K`` and
    ``A_K`` do not see). Before the first step (no state) it is the identity scaled by ``1/ε``
    — undefined in practice, so it raises.

    Args:
        optimizer: a ``torch.optim.Adam``-like optimizer (state ``exp_avg_sq``, ``step``;
            group ``betas``, ``eps``).
        parameters: name → the parameter objects the optimizer updates.

    Returns:
        The :class:`Metric` named ``adam step t``.

    Raises:
        ValueError: a parameter has no Adam state (the optimizer has not stepped).
    """
    diagonal: Params = {}
    step = 0
    for group in optimizer.param_groups:
        beta2, eps = group["betas"][1], group["eps"]
        ids = {id(p) for p in group["params"]}
        for name, p in parameters.items():
            if id(p) not in ids:
                continue
            state = optimizer.state.get(p, {})
            if "exp_avg_sq" not in state:
                raise ValueError(
                    f"adam_metric: parameter {name!r} has no Adam state; allowed: an optimizer "
                    "that has taken at least one step"
                )
            step = int(state["step"])
            v_hat = state["exp_avg_sq"].detach() / (1 - beta2**step)
            diagonal[name] = 1.0 / (v_hat.sqrt() + eps)
    missing = sorted(set(parameters) - set(diagonal))
    if missing:
        raise ValueError(f"adam_metric: parameters {missing} are not in the optimizer")
    approximation = "Adam at step t: M_t = diag(1/(sqrt(v_hat_t) + eps)); momentum, lr dropped"
    return Metric(f"adam step {step}", diagonal, approximation)

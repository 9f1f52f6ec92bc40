"""Run E copies of a model as one: parameters stacked on a leading member dimension.

Two vectorized paths. A :class:`~gaugelab.models.Transformer` (LoRA layers included) runs
*member-natively* (``_member_native``): every weight keeps its member dimension and each layer
is one batched matmul over the members, attention one call on ``[E, B, H, T, D]``; no weight is
copied per call. Any other module (or a Transformer with a module the native path does not
know: mixture-of-experts routing, adapter dropout, a subclass) runs through ``torch.func``
(``functional_call``, ``vmap``; the stacking of ``stack_module_state``), or a loop over
members where ``vmap`` cannot batch it. Gradients come from ordinary autograd on the sum of the
member losses; members never interact, so an optimizer with ``member_dims=1`` steps all of
them at once. A frozen parameter that every member holds bit for bit (the base weights of E
LoRA seeds on one model) is kept once, without a member dimension, and enters the forward
unbatched (``vmap``'s ``in_dims=None``): a linear layer then runs one matmul over all members'
inputs instead of a batched matmul over E copies of the same weight, and the base is stored
once, not E times. ``compile=True`` hands the forward (native or vmapped; and, through
AOTAutograd, its backward) to ``torch.compile``: on CPU this fuses the elementwise work between
the matmuls, which is where an eager ensemble loses its time.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Sequence

import torch
from torch import nn
from torch.func import functional_call, vmap

from gaugelab.determinism import torch_compile
from gaugelab.models._member_native import (
    NativeTransformer,
    Weights,
    compiled_attention,
    unsupported,
)

# torch's warning when vmap runs an op without a batching rule (the fused attention kernels)
_FALLBACK_WARNING = "There is a performance drop because we have not yet implemented the batching"


def _slot(name: str) -> str:
    return name.replace(".", "__")


def _equal_across(tensors) -> bool:
    """Whether the tensors are bitwise equal (same device, shape, dtype and values)."""
    first, *rest = tensors
    return all(t.device == first.device and torch.equal(t, first) for t in rest)


def _meta_copy(model: nn.Module) -> nn.Module:
    """A deep copy of ``model`` with every parameter and buffer on the meta device, tied
    tensors kept tied (``Module.to("meta")`` gives each module a parameter of its own, so a
    tied output embedding would be a meta tensor that ``functional_call`` never replaces)."""
    template = copy.deepcopy(model)
    memo: dict[int, torch.Tensor] = {}
    for module in template.modules():
        for slots in (module._parameters, module._buffers):
            for name, t in slots.items():
                if t is None:
                    continue
                if id(t) not in memo:
                    meta = torch.empty_like(t, device="meta")
                    is_param = isinstance(t, nn.Parameter)
                    memo[id(t)] = nn.Parameter(meta, t.requires_grad) if is_param else meta
                slots[name] = memo[id(t)]
    return template


class Ensemble(nn.Module):
    """E members of one architecture evaluated together.

    Every parameter keeps its members' ``requires_grad``, so ``[p for p in
    ensemble.parameters() if p.requires_grad]`` is what an optimizer should step. A parameter
    is either

    * *stacked*, ``[E, *shape]`` (:meth:`stacked_parameters`): every trainable parameter, and
      every frozen one whose members' values differ; or
    * *shared*, ``[*shape]`` (:meth:`shared_parameters`): frozen (``requires_grad=False``) in
      every member and bitwise equal across members (``torch.equal``), as the base weights of
      E LoRA seeds injected into copies of one model are. It is stored once and every member
      computes with it; :meth:`member_parameters` hands every member that same tensor.

    An ensemble of fully trainable members (the twin protocol) has no shared parameters and
    computes exactly as with every parameter stacked.

    Args:
        models: E ≥ 1 modules of identical structure (parameter names and shapes).
        vectorize: evaluate all members at once (True: natively or with ``vmap``) or loop over
            members with ``functional_call`` (False); None picks the vectorized path unless a
            submodule declares ``vmap_compatible = False`` (e.g. mixture-of-experts routing).
        native: run the member-native forward (the default, None, wherever it applies: a
            :class:`~gaugelab.models.Transformer` of known modules, see
            :mod:`gaugelab.models._member_native`, with ``vectorize`` not False); False forces
            the ``vmap`` path; True requires the native one.
        compile: run the vectorized forward through ``torch.compile`` (needs a C++ compiler;
            the first call compiles, tens of seconds). Only calls with gradients enabled use
            the compiled graph; evaluation under ``no_grad`` runs eagerly, so a new input shape
            there costs no compilation. Compiled results agree with eager ones to round-off,
            not bitwise. Identical members stay bitwise identical only under
            ``torch.use_deterministic_algorithms(True)`` (otherwise the embedding's scatter-add
            backward runs in a thread-dependent order).
        share_frozen: keep frozen parameters that are equal across members once (True), or
            stack every parameter (False; the layout before sharing existed, E copies).
        sdpa: eager calls run attention through torch's fused
            ``F.scaled_dot_product_attention`` (modules with ``use_sdpa``) instead of the plain
            ops. Natively the members are folded into the kernel's batch (``[E·B, H, T, D]``,
            one call); under vmap, which has no batching rule for the fused kernel, torch's
            fallback calls it once per member. Either way each member's attention is what its
            own model's kernel computes (the plain ops agree to ~1e-15 in float64), and at long
            windows it is faster (the [B, H, T, T] scores are never formed). None (default):
            fused on the native path, plain ops under vmap (the layout before the native path
            existed). The compiled vmap graph always uses the plain ops; the compiled native
            one uses them for windows of at most ``_member_native.BROADCAST_MAX_T`` positions
            (they fuse) and the fused kernel beyond.

    Attributes:
        n_members: E.
        names: parameter names of one member, in ``named_parameters`` order (stacked and
            shared together).
        shared_names: the names of the shared parameters (a subset of ``names``, same order).
        use_compile: whether gradient-enabled calls run the compiled forward.
        sdpa: whether eager calls use fused attention.
        native: whether the member-native forward runs (else ``vmap`` or the loop).

    Raises:
        ValueError: no models, members whose parameter names, shapes, dtypes or
            ``requires_grad`` flags differ, ``compile`` without vectorization
            (``vectorize=False``, or a submodule that is not ``vmap_compatible``), or
            ``native=True`` for a model the native path does not know (the reason named) or
            with ``vectorize=False``.

    Source: the batched-ensemble pattern of ``torch.func`` (model ensembling).
    """

    def __init__(
        self,
        models: Sequence[nn.Module],
        *,
        vectorize: bool | None = None,
        native: bool | None = None,
        compile: bool = False,
        share_frozen: bool = True,
        sdpa: bool | None = None,
    ) -> None:
        super().__init__()
        models = list(models)
        if not models:
            raise ValueError("Ensemble: models is empty; allowed: at least one module")
        reference = [(n, p.shape, p.dtype) for n, p in models[0].named_parameters()]
        for i, m in enumerate(models[1:], start=1):
            mine = [(n, p.shape, p.dtype) for n, p in m.named_parameters()]
            if mine != reference:
                raise ValueError(
                    f"Ensemble: member {i} differs from member 0 in parameter names, shapes or "
                    f"dtypes; allowed: copies of one architecture"
                )
        trainable = {n: p.requires_grad for n, p in models[0].named_parameters()}
        for i, m in enumerate(models[1:], start=1):
            if {n: p.requires_grad for n, p in m.named_parameters()} != trainable:
                raise ValueError(
                    f"Ensemble: member {i} freezes other parameters than member 0 "
                    "(requires_grad differs); allowed: members frozen alike"
                )
        member_params = [dict(m.named_parameters()) for m in models]
        self.n_members = len(models)
        self.names = list(member_params[0])
        self.shared_names = [
            n for n in self.names
            if share_frozen and not trainable[n] and _equal_across(p[n] for p in member_params)
        ]  # fmt: skip
        shared = set(self.shared_names)
        for name in self.names:
            if name in shared:  # stored once, no member dimension
                value = member_params[0][name].detach().clone()
            else:  # [E, *shape]; a frozen parameter (a LoRA base weight) stays frozen
                value = torch.stack([p[name].detach() for p in member_params])
            self.register_parameter(_slot(name), nn.Parameter(value, requires_grad=trainable[name]))
        member_buffers = [dict(m.named_buffers()) for m in models]
        self._buffer_names = list(member_buffers[0])
        for name in self._buffer_names:
            stacked = torch.stack([b[name] for b in member_buffers])
            self.register_buffer(_slot(name), stacked, persistent=False)
        # Templates are kept out of the module tree: ensemble.parameters() is the stacked and
        # shared ones.
        template = _meta_copy(models[0])
        self.__dict__["_template"] = template
        if hasattr(template, "check_inputs"):
            template.check_inputs = False
        for module in template.modules():
            if hasattr(module, "use_sdpa"):  # fused attention: vmap runs it member by member
                module.use_sdpa = bool(sdpa)  # None: plain ops under vmap
        reason = unsupported(models[0])
        if reason is None and models[0].config.positional == "alibi":
            slopes = [t for b in member_buffers for n, t in b.items() if n.endswith(".slopes")]
            if not _equal_across(slopes):
                reason = "the members' ALiBi slopes differ"
        if native and (reason is not None or vectorize is False):
            why = reason or "vectorize=False asks for the loop"
            raise ValueError(f"Ensemble: native=True, but {why}; allowed: native=None or False")
        if native is None:
            native = reason is None and vectorize is not False
        if vectorize is None:
            vectorize = native or all(
                getattr(m, "vmap_compatible", True) for m in models[0].modules()
            )
        if compile and not vectorize:
            raise ValueError(
                "Ensemble: compile=True needs a vectorized ensemble (vectorize=True and no "
                "submodule with vmap_compatible = False)"
            )
        self.vectorize = vectorize
        self.native = bool(native)
        self.use_compile = compile
        self.sdpa = bool(native) if sdpa is None else bool(sdpa)
        slopes = member_buffers[0].get("blocks.0.attn.slopes")
        self.__dict__["_native"] = NativeTransformer(template, slopes) if native else None
        # slopes: the ALiBi slopes every layer of every member holds (checked equal above)
        member_template = copy.deepcopy(models[0])
        with torch.no_grad():  # the template's shared weights are the ensemble's: one copy
            for name in self.shared_names:
                member_template.get_parameter(name).data = getattr(self, _slot(name)).detach()
        self.__dict__["_member_template"] = member_template
        fused = copy.deepcopy(template)  # the compiled graph's template
        for module in fused.modules():
            if hasattr(module, "broadcast_scores"):
                module.broadcast_scores = True
            if hasattr(module, "use_sdpa"):
                module.use_sdpa = False
        self.__dict__["_fused_template"] = fused
        self.__dict__["_compiled"] = {}  # in_dims → compiled vmapped forward

    def _vectorized(self, dims: tuple, compiled: bool):
        if compiled and dims in self._compiled:
            return self._compiled[dims]
        template = self._fused_template if compiled else self._template
        vectorized = vmap(lambda p, s, b, *x: functional_call(template, (p, s, b), x),
                          in_dims=dims, randomness="error")  # fmt: skip
        if not compiled:
            return vectorized
        self._compiled[dims] = torch_compile(vectorized, dynamic=False)
        return self._compiled[dims]

    def _native_forward(self, stacked, shared, tokens: torch.Tensor) -> torch.Tensor:
        weights = Weights(stacked, shared)
        E = self.n_members
        if not (self.use_compile and torch.is_grad_enabled()):
            attention = "sdpa" if self.sdpa else "matmul"
            return self._native.forward(weights, tokens, E, attention)
        # a LoRA layer's merged state decides the graph: one compiled forward per state
        key = ("native", tokens.dim(), tuple(m.merged for m in self._native.loras.values()))
        if key not in self._compiled:
            native = self._native
            self._compiled[key] = torch_compile(
                lambda s, h, t: native.forward(Weights(s, h), t, E, compiled_attention(t)),
                dynamic=False,
            )
        return self._compiled[key](stacked, shared, tokens)

    def stacked_parameters(self) -> dict[str, torch.Tensor]:
        """Name → stacked parameter ``[E, *shape]``: every trainable parameter (the tensors an
        optimizer steps) and every frozen one whose members differ; no shared parameter."""
        shared = set(self.shared_names)
        return {n: getattr(self, _slot(n)) for n in self.names if n not in shared}

    def shared_parameters(self) -> dict[str, torch.Tensor]:
        """Name → shared parameter ``[*shape]`` (frozen, equal in every member, stored once;
        no member dimension). Empty when every parameter is trainable."""
        return {n: getattr(self, _slot(n)) for n in self.shared_names}

    def _stacked_buffers(self) -> dict[str, torch.Tensor]:
        return {n: getattr(self, _slot(n)) for n in self._buffer_names}

    def member_parameters(self, e: int) -> dict[str, torch.Tensor]:
        """Member ``e``'s parameters ``[*shape]``, every name of :attr:`names` in its order:
        views ``[e]`` of the stacked parameters and the shared parameters themselves (the same
        tensor for every member); all share the ensemble's storage.

        Raises:
            ValueError: ``e`` outside ``0 <= e < E``.
        """
        if not 0 <= e < self.n_members:
            raise ValueError(f"Ensemble: member {e}; allowed: 0 <= e < {self.n_members}")
        stacked, shared = self.stacked_parameters(), self.shared_parameters()
        return {n: shared[n] if n in shared else stacked[n][e] for n in self.names}

    def member(self, e: int) -> nn.Module:
        """A standalone copy of member ``e`` (a module of the original class), shared
        parameters included: its tensors share no storage with the ensemble or other members.
        """
        model = copy.deepcopy(self._member_template)
        with torch.no_grad():
            for name, p in model.named_parameters():
                p.copy_(self.member_parameters(e)[name])
        return model

    def forward(self, *inputs: torch.Tensor, member_inputs: bool = False) -> torch.Tensor:
        """Evaluate every member.

        Args:
            *inputs: the model's inputs, shared by all members, or with a leading ``[E]``
                dimension when ``member_inputs``.
            member_inputs: inputs carry a member dimension.

        Returns:
            ``[E, *output]``.
        """
        validate = getattr(self._member_template, "validate_inputs", None)
        if validate is not None and inputs:
            validate(inputs[0], leading=int(member_inputs))
        params, shared = self.stacked_parameters(), self.shared_parameters()
        buffers = self._stacked_buffers()
        if self.native:
            return self._native_forward(params | buffers, shared, inputs[0])
        if self.vectorize:
            # shared parameters enter unbatched: vmap folds the members into the batch
            dims = (0, None, 0) + (0 if member_inputs else None,) * len(inputs)
            compiled = self.use_compile and torch.is_grad_enabled()
            vectorized = self._vectorized(dims, compiled)
            if compiled or not self.sdpa:
                return vectorized(params, shared, buffers, *inputs)
            with warnings.catch_warnings():  # the per-member fallback is the intended path
                warnings.filterwarnings("ignore", _FALLBACK_WARNING, UserWarning)
                return vectorized(params, shared, buffers, *inputs)
        outputs = []
        for e in range(self.n_members):
            p = {n: t[e] for n, t in params.items()}
            b = {n: t[e] for n, t in buffers.items()}
            x = tuple(t[e] for t in inputs) if member_inputs else inputs
            outputs.append(functional_call(self._template, (p, shared, b), x))
        return torch.stack(outputs)

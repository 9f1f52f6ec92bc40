"""Run E copies of a model as one: parameters stacked on a leading member dimension.

Built on ``torch.func`` (``stack_module_state``, ``functional_call``, ``vmap``). Gradients come
from ordinary autograd on the sum of the member losses; members never interact, so an
optimizer with ``member_dims=1`` steps all of them at once. ``compile=True`` hands the vmapped
forward (and, through AOTAutograd, its backward) to ``torch.compile``: on CPU this fuses the
elementwise work between the matmuls, which is where an eager ensemble loses its time.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from torch import nn
from torch.func import functional_call, stack_module_state, vmap


def _slot(name: str) -> str:
    return name.replace(".", "__")


class Ensemble(nn.Module):
    """E members of one architecture evaluated together.

    A stacked parameter keeps its members' ``requires_grad``: frozen parameters (the base
    weights of a LoRA model) stay frozen, so ``[p for p in ensemble.parameters() if
    p.requires_grad]`` is what an optimizer should step.

    Args:
        models: E ≥ 1 modules of identical structure (parameter names and shapes).
        vectorize: evaluate with ``vmap`` (True) or loop over members with
            ``functional_call`` (False); None picks vmap unless a submodule declares
            ``vmap_compatible = False`` (e.g. mixture-of-experts routing).
        compile: run the vmapped forward through ``torch.compile`` (needs a C++ compiler;
            the first call compiles, tens of seconds). Only calls with gradients enabled use
            the compiled graph; evaluation under ``no_grad`` runs eagerly, so a new input shape
            there costs no compilation. Compiled results agree with eager ones to round-off,
            not bitwise. Identical members stay bitwise identical only under
            ``torch.use_deterministic_algorithms(True)`` (otherwise the embedding's scatter-add
            backward runs in a thread-dependent order).

    Attributes:
        n_members: E.
        names: parameter names of one member, in ``named_parameters`` order.
        use_compile: whether gradient-enabled calls run the compiled forward.

    Raises:
        ValueError: no models, members whose parameter names, shapes, dtypes or
            ``requires_grad`` flags differ, or ``compile`` without vectorization
            (``vectorize=False``, or a submodule that is not ``vmap_compatible``).

    Source: the batched-ensemble pattern of ``torch.func`` (model ensembling).
    """

    def __init__(
        self,
        models: Sequence[nn.Module],
        *,
        vectorize: bool | None = None,
        compile: bool = False,
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
        params, buffers = stack_module_state(models)
        self.n_members = len(models)
        self.names = list(params)
        self._buffer_names = list(buffers)
        for name, p in params.items():
            # a frozen parameter (a LoRA base weight) stays frozen in the stack
            stacked = nn.Parameter(p.detach().clone(), requires_grad=trainable[name])
            self.register_parameter(_slot(name), stacked)
        for name, b in buffers.items():
            self.register_buffer(_slot(name), b.clone(), persistent=False)
        # Templates are kept out of the module tree, so ensemble.parameters() is the stacked ones.
        template = copy.deepcopy(models[0]).to("meta")
        self.__dict__["_template"] = template
        if hasattr(template, "check_inputs"):
            template.check_inputs = False
        for module in template.modules():
            if hasattr(module, "use_sdpa"):  # fused attention kernels have no vmap rule
                module.use_sdpa = False
        if vectorize is None:
            vectorize = all(getattr(m, "vmap_compatible", True) for m in models[0].modules())
        if compile and not vectorize:
            raise ValueError(
                "Ensemble: compile=True needs a vectorized ensemble (vectorize=True and no "
                "submodule with vmap_compatible = False)"
            )
        self.vectorize = vectorize
        self.use_compile = compile
        self.__dict__["_member_template"] = copy.deepcopy(models[0])
        fused = copy.deepcopy(template)  # the compiled graph's template
        for module in fused.modules():
            if hasattr(module, "broadcast_scores"):
                module.broadcast_scores = True
        self.__dict__["_fused_template"] = fused
        self.__dict__["_compiled"] = {}  # in_dims → compiled vmapped forward

    def _vectorized(self, dims: tuple, compiled: bool):
        if compiled and dims in self._compiled:
            return self._compiled[dims]
        template = self._fused_template if compiled else self._template
        vectorized = vmap(lambda p, b, *x: functional_call(template, (p, b), x),
                          in_dims=dims, randomness="error")  # fmt: skip
        if not compiled:
            return vectorized
        self._compiled[dims] = torch.compile(vectorized, dynamic=False)
        return self._compiled[dims]

    def stacked_parameters(self) -> dict[str, torch.Tensor]:
        """Name → stacked parameter ``[E, *shape]`` (the tensors an optimizer steps)."""
        return {n: getattr(self, _slot(n)) for n in self.names}

    def _stacked_buffers(self) -> dict[str, torch.Tensor]:
        return {n: getattr(self, _slot(n)) for n in self._buffer_names}

    def member_parameters(self, e: int) -> dict[str, torch.Tensor]:
        """Views ``[*shape]`` of member ``e``'s parameters (they share storage)."""
        if not 0 <= e < self.n_members:
            raise ValueError(f"Ensemble: member {e}; allowed: 0 <= e < {self.n_members}")
        return {n: p[e] for n, p in self.stacked_parameters().items()}

    def member(self, e: int) -> nn.Module:
        """A standalone copy of member ``e`` (a module of the original class)."""
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
        params, buffers = self.stacked_parameters(), self._stacked_buffers()
        if self.vectorize:
            dims = (0, 0) + (0 if member_inputs else None,) * len(inputs)
            compiled = self.use_compile and torch.is_grad_enabled()
            return self._vectorized(dims, compiled)(params, buffers, *inputs)
        outputs = []
        for e in range(self.n_members):
            p = {n: t[e] for n, t in params.items()}
            b = {n: t[e] for n, t in buffers.items()}
            x = tuple(t[e] for t in inputs) if member_inputs else inputs
            outputs.append(functional_call(self._template, (p, b), x))
        return torch.stack(outputs)

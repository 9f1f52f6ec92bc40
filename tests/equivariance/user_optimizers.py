"""User-written optimizers for the checker's tests: measured whether or not they call the
closure, and never certified when they do not move (tests/equivariance/test_check.py imports
them; tests/cli/test_check_cli.py and test_atlas_cli.py copy this file into a user's folder as
myopts.py)."""

import torch


class ClosureFreeSGD(torch.optim.Optimizer):
    """SGD that never calls the closure: it reads the gradients the caller has set."""

    def __init__(self, params, lr=1e-2):
        super().__init__(params, {"lr": lr})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.add_(p.grad, alpha=-group["lr"])


class StepSelfSGD(ClosureFreeSGD):
    """The same SGD, with a ``step(self)`` that takes no closure at all."""

    def step(self):
        super().step()


class NoOp(ClosureFreeSGD):
    """A ``step`` that does nothing: the parameters never move."""

    def step(self, closure=None):
        return None


class ColumnNormalisedSGD(ClosureFreeSGD):
    """SGD with each column of the gradient divided by its norm: the columns are a basis."""

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                norms = torch.linalg.vector_norm(p.grad, dim=0, keepdim=True)
                p.add_(p.grad / norms, alpha=-group["lr"])


class NotAnOptimizer:
    """A class that is not a torch.optim.Optimizer."""


class RaisesInStep(ClosureFreeSGD):
    """A rule whose third step fails inside, as a shape bug in a foreign optimizer does."""

    def step(self, closure=None):
        self.state.setdefault("t", 0)
        self.state["t"] += 1
        if self.state["t"] == 3:
            raise RuntimeError("The size of tensor a (6) must match the size of tensor b (3)")
        super().step()


class NeedsFlags(ClosureFreeSGD):
    """A Muon-style rule that reads a flag its parameter groups must declare."""

    def __init__(self, params, lr=1e-2):
        super().__init__(params, lr)
        for group in self.param_groups:
            group.pop("use_muon", None)

    def step(self, closure=None):
        for group in self.param_groups:
            if group["use_muon"]:
                super().step()


class RaisesInConstructor(ClosureFreeSGD):
    """A constructor that raises something other than a ValueError."""

    def __init__(self, params, lr=1e-2):
        raise KeyError("betas")


class NotImplementedStep(ClosureFreeSGD):
    """A ``step`` left abstract."""

    def step(self, closure=None):
        raise NotImplementedError


class Rebinds(ClosureFreeSGD):
    """A step that replaces each parameter's data with another shape."""

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                p.data = p.data.flatten()


class NeedsHessian(ClosureFreeSGD):
    """A Hessian method: it differentiates the gradient, which needs create_graph=True."""

    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad.grad_fn is None:
                    raise RuntimeError(
                        "gradient tensors have no graph: call backward(create_graph=True)"
                    )


class Diverges(ClosureFreeSGD):
    """A step that sends every parameter to infinity: the run diverges."""

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                p.fill_(float("inf"))


class SlowStep(ClosureFreeSGD):
    """A step that takes an hour (stopped by the atlas's time limit)."""

    def step(self, closure=None):
        import time

        time.sleep(3600)


class RefusesParameters(ClosureFreeSGD):
    """A constructor that refuses the parameters it is given (a ValueError, as torch's do)."""

    def __init__(self, params, lr=1e-2):
        raise ValueError("only 1-D parameters are supported")


class DifferentiatesTheGradient(ClosureFreeSGD):
    """A Hessian-vector rule (AdaHessian, SophiaH): autograd through a gradient without a graph."""

    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                torch.autograd.grad(p.grad.sum(), p)


class NeedsMuonGroups(torch.optim.Optimizer):
    """pytorch-optimizer's Muon convention: every parameter group must declare ``use_muon``
    (its constructor reads each entry of ``params`` as a group dict, as Muon's does, so a plain
    list of tensors fails with torch's ``Tensor.__contains__`` error). A ``use_muon=True`` group
    takes SGD steps; a ``use_muon=False`` group is left as it is."""

    def __init__(self, params, lr=1e-2):
        params = list(params)
        for group in params:
            if "use_muon" not in group:
                raise ValueError("`use_muon` must be set.")
        super().__init__(params, {"lr": lr})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if group["use_muon"] and p.grad is not None:
                    p.add_(p.grad, alpha=-group["lr"])


class NeedsMuonGroupsToo(NeedsMuonGroups):
    """A subclass: adapted as its base is."""


class SeededNoisySGD(ClosureFreeSGD):
    """SGD plus noise: from ``torch.Generator().manual_seed(seed)`` when a seed is given (every
    run draws the same numbers), else from torch's global generator (no two runs agree)."""

    def __init__(self, params, lr=1e-2, seed=None):
        super().__init__(params, lr)
        self.gen = None if seed is None else torch.Generator().manual_seed(seed)

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                noise = torch.randn(p.shape, generator=self.gen, dtype=p.dtype)
                p.add_(p.grad + 1e-3 * noise, alpha=-group["lr"])


class GeneratorNoisySGD(SeededNoisySGD):
    """The same noise, drawn from a ``generator`` the caller gives (global when ``None``)."""

    def __init__(self, params, lr=1e-2, generator=None):
        super().__init__(params, lr)
        self.gen = generator

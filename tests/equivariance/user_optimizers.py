"""User-written optimizers for the checker's tests: measured whether or not they call the
closure, and never certified when they do not move (tests/equivariance/test_check.py imports
them; tests/cli/test_check_cli.py copies this file into a user's folder as myopts.py)."""

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

"""torch.optim's guards against ``torch.compile``, without loading the compiler where none runs.

``torch.optim.Optimizer`` wraps ``add_param_group``, ``zero_grad``, ``state_dict`` and
``load_state_dict`` in ``torch._disable_dynamo``, and each rule's ``step`` in a wrapper that sets
the grad mode between two ``torch._dynamo.graph_break()`` calls. Both wrappers import
``torch._dynamo`` on their first call: about a second and 70 MiB (the compiler, sympy), paid by
every process that builds an optimizer. Outside a compiled frame they do nothing else, and a
process that has not imported ``torch._dynamo`` cannot be inside one. So until the compiler is
loaded, our rules call the functions torch wraps (``__wrapped__``, which ``functools.wraps``
sets), under the grad mode torch's step wrapper would set; once it is loaded they call torch's
wrappers unchanged.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

_COMPILER = "torch._dynamo"


def compiler_loaded() -> bool:
    """Whether ``torch._dynamo`` has been imported in this process."""
    return _COMPILER in sys.modules


def torch_method(bound: Callable) -> Callable:
    """``bound`` (a ``torch.optim`` method bound to an optimizer) once the compiler is loaded;
    before that, the function torch's guard wraps, bound to the same optimizer (``bound``
    itself if it wraps nothing)."""
    if compiler_loaded():
        return bound
    wrapped = getattr(getattr(bound, "__func__", None), "__wrapped__", None)
    return bound if wrapped is None else wrapped.__get__(bound.__self__)

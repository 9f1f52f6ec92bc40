"""Deterministic execution: the one switch every training loop and benchmark runs under."""

from __future__ import annotations

import contextlib
import getpass
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import torch

__all__ = ["deterministic", "torch_compile"]

_COMPILER_CONFIG = "torch._inductor.config"


def _set(mode: bool, warn_only: bool) -> None:
    # torch.use_deterministic_algorithms also sets the compiler's own flag, and to do so imports
    # the whole compiler stack (torch._inductor, torch._dynamo, sympy: over a second and ~70 MiB)
    # into every process, most of which never compile. The flag matters only to a compilation,
    # so it is set here once the compiler is loaded, and by torch_compile before one.
    direct = getattr(torch._C, "_set_deterministic_algorithms", None)  # what torch's setter calls
    if _COMPILER_CONFIG in sys.modules or direct is None:
        torch.use_deterministic_algorithms(mode, warn_only=warn_only)
    else:
        direct(mode, warn_only=warn_only)


@contextlib.contextmanager
def deterministic() -> Iterator[None]:
    """``torch.use_deterministic_algorithms(True)`` for the duration (the previous setting is
    restored after). Ensemble members that start equal stay bitwise equal under it, compiled
    or not (see :class:`gaugelab.models.Ensemble`). The compiler's flag
    (``torch._inductor.config.deterministic``) follows it wherever the compiler is loaded;
    compile through :func:`torch_compile` so that it does."""
    before = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    _set(True, False)
    try:
        yield
    finally:
        _set(before, warn_only)


def torch_compile(fn: Callable, **options: Any) -> Callable:
    """``torch.compile(fn, **options)`` with the compiler's deterministic flag set to the
    current ``torch.are_deterministic_algorithms_enabled()`` (see :func:`deterministic`, which
    keeps the two together from then on).

    Under ``ATEN_CPU_CAPABILITY`` (and no ``TORCHINDUCTOR_CACHE_DIR`` of the user's) the
    compiler's kernel cache is one for that setting, ``torchinductor_<user>_<setting>`` in the
    temporary folder: torch keys the cache without it, and a vectorised kernel cached under the
    CPU's own kernels fails to build under ``default`` ("'at::vec' has not been declared")."""
    kernels = os.environ.get("ATEN_CPU_CAPABILITY")
    if kernels and "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(
            tempfile.gettempdir(), f"torchinductor_{getpass.getuser()}_{kernels}"
        )
    import torch._inductor.config as compiler

    compiler.deterministic = torch.are_deterministic_algorithms_enabled()
    return torch.compile(fn, **options)

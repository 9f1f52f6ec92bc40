"""Package faces that import their submodules on first use.

This is the one place where gaugelab defers imports: ``gaugelab --help``, ``gaugelab runs`` and
store-only worker processes must not pay for torch, matplotlib or the executors, so a package
whose submodules import them (``gaugelab.study``, ``gaugelab.experiments`` and each experiment
package) exposes its public names through :func:`lazy_exports` instead of importing them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    package: str, exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for a package face.

    Args:
        package: the package's ``__name__``.
        exports: exported name → the submodule that defines it, relative to ``package``
            (``"store.db"``) or absolute (``"gaugelab.study.spec"``).

    Returns:
        ``(__getattr__, __dir__)``: assign both at module level; a name is imported from its
        submodule when first read.

    Raises:
        AttributeError: (from ``__getattr__``) a name that is not exported.
    """

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        path = module if module.startswith("gaugelab.") else f"{package}.{module}"
        return getattr(importlib.import_module(path), name)

    def __dir__() -> list[str]:
        return sorted(exports)

    return __getattr__, __dir__

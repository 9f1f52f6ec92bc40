"""Deferred imports: package faces and modules imported on first use.

This is the one place where gaugelab defers imports. ``gaugelab --help``, ``gaugelab runs`` and
store-only worker processes must not pay for torch, matplotlib or the executors, so

* a package face re-exports its modules' names through :func:`lazy_face` (each experiment
  package, the low-rank subpackages, the store and the report builder) or, where it picks
  names from many modules, through :func:`lazy_exports` (``gaugelab.study``,
  ``gaugelab.experiments``);
* the CLI names the heavy modules it calls as :class:`LazyModule` at its top
  (``torch = LazyModule("torch")``) instead of importing them inside each command.

Everything else imports at the top of its module.
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


def lazy_face(
    package: str, *modules: str
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for a package face that re-exports its modules' names.

    The face lists no names of its own: a name is looked up in each module's ``__all__``, in
    the order given, when it is first read (the module is imported then).

    Args:
        package: the package's ``__name__``.
        modules: its submodules whose ``__all__`` the face re-exports (``"run"``, ``"db"``).

    Returns:
        ``(__getattr__, __dir__)``: assign both at module level.

    Raises:
        AttributeError: (from ``__getattr__``) a name none of the modules exports.
    """

    def exporting(name: str) -> Any:
        for module in modules:
            loaded = importlib.import_module(f"{package}.{module}")
            if name in getattr(loaded, "__all__", ()):
                return loaded
        return None

    def __getattr__(name: str) -> Any:
        loaded = None if name.startswith("__") else exporting(name)
        if loaded is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(loaded, name)

    def __dir__() -> list[str]:
        names = {n for m in modules for n in importlib.import_module(f"{package}.{m}").__all__}
        return sorted(names)

    return __getattr__, __dir__


class LazyModule:
    """A stand-in for a module, imported when one of its attributes is first read.

    Unlike :class:`importlib.util.LazyLoader`, nothing is put into ``sys.modules`` before the
    import happens, so a process that never reads an attribute has really not imported it (the
    startup tests check ``sys.modules``).

    Args:
        name: the module's dotted name (``"torch"``, ``"gaugelab.experiments.sensing.zoo"``).
    """

    def __init__(self, name: str) -> None:
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_module", None)

    def __getattr__(self, attr: str) -> Any:
        # reached only for names the stand-in lacks: the module is imported once, then kept
        if self._module is None:
            object.__setattr__(self, "_module", importlib.import_module(self._name))
        return getattr(self._module, attr)

    def __repr__(self) -> str:
        return f"<lazy module {self._name!r}>"

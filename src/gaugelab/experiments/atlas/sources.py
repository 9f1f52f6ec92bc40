"""Where the atlas's optimizers come from: every ``torch.optim.Optimizer`` class a module exports.

A *source* is an importable module — ``torch.optim``, ``pytorch_optimizer``, ``heavyball`` (the
``gaugelab[atlas]`` extra pins the last two), or any module of your own, imported with the
current directory first on ``sys.path`` as ``module:Class`` targets are
(:func:`gaugelab.equivariance.targets.import_from_cwd`). Its optimizers are its public names
(``__all__``, else the names without a leading underscore) bound to concrete subclasses of
``torch.optim.Optimizer``, other than ``torch.optim.Optimizer`` itself, abstract base classes
and classes another package defines (a re-export, such as a torch optimizer a third-party
package exports again, belongs to its own package's atlas). Each comes with its *version* — the
installed distribution's (``torch 2.13.0``), or for a module that no distribution owns the
sha256 of its file — so a stored check is reused only while the code it checked is the same.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import inspect
from pathlib import Path
from types import ModuleType

import torch

from gaugelab.equivariance.targets import import_from_cwd, one_line
from gaugelab.experiments.atlas.spec import Candidate

KNOWN_SOURCES: tuple[str, ...] = ("torch.optim", "pytorch_optimizer", "heavyball")
"""The sources the atlas is published for (docs/atlas.md); any importable module is accepted."""
EXTRA = "gaugelab[atlas]"
"""The optional dependencies that install the third-party sources (pytorch-optimizer, heavyball)."""


@functools.cache
def _distributions() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()


def module_version(module: ModuleType) -> str:
    """``"<distribution> <version>"`` of the installed distribution that owns ``module``'s
    top-level package, else ``"sha256:<16 hex>"`` of the module's file, else ``"unknown"``."""
    top = module.__name__.partition(".")[0]
    for dist in _distributions().get(top, []):
        try:
            return f"{dist} {importlib.metadata.version(dist)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    file = getattr(module, "__file__", None)
    if file and Path(file).is_file():
        return "sha256:" + hashlib.sha256(Path(file).read_bytes()).hexdigest()[:16]
    return "unknown"


def _import(source: str) -> ModuleType:
    if not source or any(not part.isidentifier() for part in source.split(".")):
        raise ValueError(
            f"discover_optimizers: source={source!r}; allowed: a module name such as "
            f"{', '.join(KNOWN_SOURCES)}"
        )
    try:
        return import_from_cwd(source)
    except ModuleNotFoundError as exc:
        if exc.name is not None and source.startswith(exc.name):  # the source itself is missing
            hint = (
                f"pip install '{EXTRA}' installs it"
                if source.partition(".")[0] in KNOWN_SOURCES[1:]
                else f"an importable module (the extra {EXTRA} installs "
                f"{', '.join(KNOWN_SOURCES[1:])})"
            )
            raise ValueError(
                f"discover_optimizers: source={source!r} is not installed; allowed: {hint}"
            ) from None
        raise ValueError(
            f"discover_optimizers: source={source!r} cannot be imported ({one_line(exc)})"
        ) from None
    except (Exception, SystemExit) as exc:  # whatever the module raises on import
        raise ValueError(
            f"discover_optimizers: source={source!r} cannot be imported ({one_line(exc)})"
        ) from None


def _exported(module: ModuleType) -> list[str]:
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n in vars(module) if not n.startswith("_")]
    return sorted(dict.fromkeys(str(n) for n in names))


def discover_optimizers(source: str) -> list[Candidate]:
    """Every optimizer class ``source`` exports, as atlas candidates.

    Args:
        source: a module name (``"torch.optim"``, ``"pytorch_optimizer"``, ``"myopts"`` for a
            ``myopts.py`` in the current directory).

    Returns:
        One :class:`~gaugelab.experiments.atlas.spec.Candidate` per class, sorted by exported
        name: ``target`` ``"<source>:<name>"`` (a class exported under several names is taken
        once, under its first name), ``version`` from :func:`module_version` of the module
        that defines the class.

    Raises:
        ValueError: ``source`` is not a module name, is not installed (the message names the
            extra ``gaugelab[atlas]``), or raises on import (the message gives its error).
    """
    module = _import(source)
    top = module.__name__.partition(".")[0]
    seen: set[type] = set()
    found = []
    for name in _exported(module):
        obj = getattr(module, name, None)
        if not (isinstance(obj, type) and issubclass(obj, torch.optim.Optimizer)):
            continue
        if obj is torch.optim.Optimizer or inspect.isabstract(obj) or obj in seen:
            continue
        if obj.__module__.partition(".")[0] != top:
            continue  # a re-export: it belongs to its own package's atlas
        seen.add(obj)
        owner = inspect.getmodule(obj) or module
        found.append(Candidate(target=f"{source}:{name}", version=module_version(owner)))
    return found


__all__ = ["EXTRA", "KNOWN_SOURCES", "discover_optimizers", "module_version"]

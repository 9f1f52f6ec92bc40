"""Which optimizer a check runs: a zoo name, a class, or ``"package.module:Class"``.

:func:`resolve_optimizer` turns any of the three into a name and a factory ``params ↦
optimizer``; ``module:Class`` is imported with the current directory first on ``sys.path``.
Every way a target can be wrong — an unknown zoo name, a module that is missing or raises on
import, an attribute that is not there, an object that is not a ``torch.optim.Optimizer``
subclass, a hyperparameter the class does not take — is one exception whose message names the
target and what is allowed. :func:`gaugelab.equivariance.check.check_equivariance` is the
caller, so the messages carry its name.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

from gaugelab.optim import OPTIMIZERS, make_optimizer

Factory = Callable[[list], torch.optim.Optimizer]


@contextmanager
def _cwd_first() -> Iterator[None]:
    """The current directory first on ``sys.path`` for one import, as ``python -m`` puts it."""
    cwd = os.getcwd()
    sys.path.insert(0, cwd)
    importlib.invalidate_caches()  # a module written since start-up is found
    try:
        yield
    finally:
        if cwd in sys.path:
            sys.path.remove(cwd)  # the first occurrence: ours, unless the import added one


def import_from_cwd(module_name: str):
    """Import ``module_name`` with the current directory first on ``sys.path`` (as ``python -m``
    puts it; ``sys.path`` is restored afterwards), so ``myopts`` finds a ``myopts.py`` beside
    the caller. How a ``module:Class`` target's module is imported, and what
    ``gaugelab atlas --source MODULE`` imports.

    Raises:
        whatever the import raises (``ModuleNotFoundError``, or the module's own error).
    """
    with _cwd_first():
        return importlib.import_module(module_name)


def one_line(exc: BaseException) -> str:
    """``"Type: message"`` with the message's whitespace folded onto one line."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _describe(obj) -> str:
    if isinstance(obj, type):
        return f"the class {obj.__module__}.{obj.__qualname__}"
    if isinstance(obj, torch.optim.Optimizer):
        return f"an instance of {type(obj).__qualname__} (give the class, not an instance)"
    return f"a {type(obj).__name__}"


def _import_target(target: str):
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise ValueError(f"check_equivariance: optimizer={target!r}; allowed: 'module:Class'")
    try:
        module = import_from_cwd(module_name)
    except (Exception, SystemExit) as exc:  # whatever the user's module raises on import
        raise ValueError(
            f"check_equivariance: cannot import module {module_name!r} for {target!r} "
            f"({one_line(exc)}); allowed: a zoo name or 'module:Class' importable from the "
            f"current directory or sys.path"
        ) from None
    if not hasattr(module, attr):
        public = sorted(
            n
            for n, v in vars(module).items()
            if isinstance(v, type) and issubclass(v, torch.optim.Optimizer)
        )
        raise ValueError(
            f"check_equivariance: module {module_name!r} has no {attr!r}; optimizers "
            f"there: {', '.join(public) or 'none'}"
        )
    return getattr(module, attr)


def _suggestion(name: str) -> str:
    """`` (did you mean gd, or torch.optim:SGD?)`` for a name close to a zoo rule or equal,
    up to case, to a torch.optim class; ``""`` otherwise."""
    close = difflib.get_close_matches(name.lower(), sorted(OPTIMIZERS), n=2, cutoff=0.6)
    classes = [f"torch.optim:{c}" for c in dir(torch.optim)
               if c.lower() == name.lower() and isinstance(getattr(torch.optim, c), type)
               and issubclass(getattr(torch.optim, c), torch.optim.Optimizer)]  # fmt: skip
    options = close + classes
    return f" (did you mean {', or '.join(options)}?)" if options else ""


def closure_style(step: Callable) -> str | None:
    """How an optimizer's ``step`` takes a closure: ``"positional"``, ``"keyword"``, or ``None``
    (it takes none): how the check calls it."""
    try:
        parameters = list(inspect.signature(step).parameters.values())
    except (TypeError, ValueError):
        return "positional"  # no signature to read: torch's convention, step(closure=None)
    for p in parameters:
        if p.name == "closure":
            return "keyword" if p.kind is p.KEYWORD_ONLY else "positional"
    first = parameters[0] if parameters else None
    if first is not None and (
        first.kind is first.VAR_POSITIONAL
        or (first.kind in (first.POSITIONAL_ONLY, first.POSITIONAL_OR_KEYWORD)
            and first.default is first.empty)
    ):  # fmt: skip
        return "positional"
    return None


def resolve_target(optimizer, hyper: dict) -> tuple[str, type | None, Factory]:
    """:func:`resolve_optimizer`, also returning the class (``None`` for a zoo name).

    The check needs the class to recognise implementations with a known cause of failure
    (``torch.optim.Muon``'s bfloat16 arithmetic).
    """
    if isinstance(optimizer, str) and ":" not in optimizer:
        if optimizer not in OPTIMIZERS:
            known = ", ".join(sorted(OPTIMIZERS))
            raise ValueError(
                f"check_equivariance: unknown optimizer {optimizer!r}{_suggestion(optimizer)}; "
                f"known rules: {known}; or give a class as 'package.module:Class'"
            )
        probe = [torch.zeros(2, 2, requires_grad=True) for _ in range(2)]  # a factor pair
        make_optimizer(optimizer, probe, **hyper)  # validates the hyperparameters
        return optimizer, None, lambda params: make_optimizer(optimizer, params, **hyper)
    target = repr(optimizer)  # 'myopts:MyOpt', or the object given
    if isinstance(optimizer, str):
        optimizer = _import_target(optimizer)
    if not (isinstance(optimizer, type) and issubclass(optimizer, torch.optim.Optimizer)):
        raise TypeError(
            f"check_equivariance: optimizer {target} is {_describe(optimizer)}, not a "
            f"torch.optim.Optimizer subclass"
        )
    cls = optimizer
    name = f"{cls.__module__}:{cls.__qualname__}"
    for zoo_name, rule in OPTIMIZERS.items():
        if rule.cls is cls:
            name = zoo_name
    allowed = [p for p in inspect.signature(cls.__init__).parameters if p not in ("self", "params")]
    unknown = sorted(set(hyper) - set(allowed))
    if unknown and not any(
        p.kind is inspect.Parameter.VAR_KEYWORD
        for p in inspect.signature(cls.__init__).parameters.values()
    ):
        raise ValueError(
            f"check_equivariance: unknown hyperparameter(s) {', '.join(unknown)} for {name}; "
            f"allowed: {', '.join(allowed)}"
        )
    return name, cls, lambda params: cls(params, **hyper)


def resolve_optimizer(optimizer, hyper: dict) -> tuple[str, Factory]:
    """Turn a zoo name, a class, or ``"package.module:Class"`` into a named factory.

    ``module`` is imported with the current directory first on ``sys.path`` (as ``python -m``
    does), so ``myopts:MyOpt`` finds a ``myopts.py`` beside the caller; ``sys.path`` is restored
    afterwards.

    Args:
        optimizer: a zoo name (``"muon"``), a ``torch.optim.Optimizer`` subclass, or the
            string ``"package.module:Class"``.
        hyper: keyword hyperparameters for the rule (a zoo rule validates them; a class must
            accept them in ``__init__`` unless it takes ``**kwargs``).

    Returns:
        ``(name, factory)``: the zoo name when the rule or class is in the zoo, else
        ``"module:Class"``; ``factory(params)`` builds the optimizer over a list of tensors.

    Raises:
        ValueError: unknown zoo name, malformed ``module:Class``, a module that cannot be
            imported (not found, or raising on import: the message names the target and the
            exception), a missing attribute, or an unknown hyperparameter.
        TypeError: the object is not a ``torch.optim.Optimizer`` subclass.
    """
    name, _, factory = resolve_target(optimizer, hyper)
    return name, factory

"""What a foreign optimizer's failure says: its one-line reason and what it appears to need.

:func:`reason` folds an exception into ``"Type: first line"``; :func:`hint` reads its words (and,
for a constructor that failed on the plain parameter list, the group keys its source requires:
:func:`gaugelab.equivariance.param_groups.needed_group_keys`) into what the optimizer needed;
:func:`seed_hint` names the constructor argument that would make a randomised rule repeatable.
The check (:func:`gaugelab.equivariance.check_equivariance`) puts them in its
:class:`gaugelab.errors.OptimizerFailure` and its ``nondeterministic`` explanation.
"""

from __future__ import annotations

import inspect
import re

from gaugelab.equivariance.param_groups import needed_group_keys

_HINTS = (
    (("create_graph", "hessian", "second order", "second-order", "does not require grad"),
     "it needs second-order gradients (backward(create_graph=True)), which the check does "
     "not compute"),
    (("use_muon",), "it needs parameter groups flagged for it (use_muon=…); see its docs"),
    ((" shape", "size mismatch", "must match the size"),
     "it may expect other parameter shapes (e.g. 2-D only, or a fixed layout)"),
)  # fmt: skip
"""Words in an optimizer's error → what it appears to need."""

_AS_GROUP = "tensor.__contains__ only supports tensor or scalar"
"""torch's error for ``'key' in tensor``: the rule read a parameter as a parameter-group dict."""

SEED_ARGUMENTS = ("seed", "generator", "rng", "random_state", "random_seed")
"""Constructor arguments through which a randomised rule takes its randomness."""


_COMPILED = re.compile(r"""got (\w+)\((['"])(.+?)\2\)""")
"""torch.compile's report of the error a traced call raised: ``got RuntimeError('…')``."""


def reason(exc: BaseException) -> str:
    """``"Type: first line of the message"``; for an error torch.compile met while tracing
    (its first line only says ``RuntimeError when making fake tensor call``), the traced
    call's own error: ``"RuntimeError: expected scalar type torch.float64 but found
    torch.float32 (under torch.compile)"``."""
    message = str(exc).strip()
    text = message.splitlines()
    if not text:
        return type(exc).__name__
    if "fake tensor" in text[0] and (found := _COMPILED.search(message)):
        return f"{found.group(1)}: {found.group(3)} (under torch.compile)"
    return f"{type(exc).__name__}: {text[0]}"


def hint(exc: BaseException, cls: type | None = None) -> str:
    """What the optimizer appears to need, from its exception (``""`` when nothing is known).

    Args:
        exc: what the optimizer raised.
        cls: the optimizer class, for a constructor's failure (``None`` otherwise): a rule that
            read a parameter as a group dict, or whose message names a key its source requires
            of its groups, is told to need those keys and the adapter table it has no entry in.
    """
    text = f"{type(exc).__name__} {exc}".lower()
    keys = needed_group_keys(cls) if cls is not None else []
    if keys and (_AS_GROUP in text or any(k.lower() in text for k in keys)):
        return (
            f"it needs parameter groups that declare {', '.join(keys)}, and "
            f"gaugelab.equivariance.param_groups.ADAPTERS has no entry for it"
        )
    if _AS_GROUP in text:
        return (
            "it reads each parameter as a parameter-group dict: it needs its groups declared "
            "its own way, and gaugelab.equivariance.param_groups.ADAPTERS has no entry for it"
        )
    for words, found in _HINTS:
        if any(w in text for w in words):
            return found
    if isinstance(exc, NotImplementedError):
        return "its step() is not implemented"
    return ""


def seed_hint(cls: type | None, hyper: dict) -> str:
    """For a ``nondeterministic`` rule: how it could be made repeatable, when ``cls.__init__``
    takes one of :data:`SEED_ARGUMENTS` that ``hyper`` leaves unset; ``""`` otherwise (a zoo
    rule, no such argument, or one already given).

    A seed (``seed``, ``random_state``, ``random_seed``) is a number every run can be given
    alike; a generator (``generator``, ``rng``) an object, one per run seeded alike (one object
    shared by the runs would advance between the twins). The check's own ``seed`` seeds the
    problem and the draws, not the optimizer, so the hint names a subclass that fixes it.
    """
    if cls is None:
        return ""
    try:
        names = inspect.signature(cls.__init__).parameters
    except (TypeError, ValueError):
        return ""
    taken = [n for n in SEED_ARGUMENTS if n in names and n not in hyper]
    if not taken:
        return ""
    name = taken[0]
    if name in ("generator", "rng"):
        how = f"give each run its own, seeded alike ({name}=torch.Generator().manual_seed(0))"
    else:
        how = f"give every run the same one ({name}=0)"
    return (
        f"; it is randomised and its constructor takes {name}: {how}, e.g. in a subclass, so "
        f"that every twin draws the same numbers"
    )


__all__ = ["SEED_ARGUMENTS", "hint", "reason", "seed_hint"]

"""The zoo's registry: names → rules, ``make_optimizer``, and the equivariance claims."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field

import torch

from gaugelab.optim.adafactor import Adafactor
from gaugelab.optim.adam import Adam, AdamW, RMSprop
from gaugelab.optim.adam_p import AdamP, ScalarAdam
from gaugelab.optim.muon import Muon
from gaugelab.optim.scaled_gd import ScaledGD
from gaugelab.optim.sgd import GD, HeavyBall, Nesterov
from gaugelab.optim.shampoo import Shampoo
from gaugelab.optim.sign import Lion, SignSGD, Signum

EQUIVARIANT = "equivariant"
BREAKS = "breaks"
CLAIM_GROUPS = ("orthogonal", "signed-permutation", "general-linear")

# Sources of the claims (singh2026lossbasis numbering).
_GD = "singh2026lossbasis, Prop. 4.2(1)"
_SCALAR = "singh2026lossbasis, Prop. 4.2(2)"
_MUON = "singh2026lossbasis, Prop. 4.2(3)"
_SHAMPOO = "singh2026lossbasis, Prop. 4.2(4)"
_ENTRYWISE = "singh2026lossbasis, Prop. 4.3 (nonlinear entrywise first step)"
_ADAM = "singh2026lossbasis, Props. 4.3-4.4 (first-step Adam defect)"
_ADAFACTOR = "singh2026lossbasis, App. B.4 (factored statistics, checked separately)"
_DIAL = "singh2026lossbasis, §7 (the Adam-p dial: equivariant only at p = 0)"
_SCALED_GD = (
    "tong2021accelerating (ScaledGD); zhang2024riemannian (its LoRA form); "
    "singh2026lossbasis, Remark 4.7 and App. D.10: G_U (VᵀV)⁻¹ ↦ G_U (VᵀV)⁻¹ M under "
    "(U M, V M⁻ᵀ); the damping λI moves only when M is orthogonal (λ ∝ trace)"
)
_SIGNED = (
    "signed permutations map coordinates to coordinates: odd entrywise maps and entrywise "
    "statistics of G² commute with them (and they are a subgroup of O(k))"
)
_GL = (
    "singh2026lossbasis, Lemma 4.1 and §3: gradients are covariant only under O(k); "
    "a non-orthogonal A sends the gradient to G A⁻ᵀ, not G A"
)


@dataclass(frozen=True)
class Claim:
    """The claimed behaviour of one rule under one gauge group.

    Attributes:
        property: ``"equivariant"`` or ``"breaks"``.
        source: the paper and result the claim rests on.
        note: conditions on hyperparameters, if any.
    """

    property: str
    source: str
    note: str = ""


@dataclass(frozen=True)
class Rule:
    """One entry of the zoo.

    Attributes:
        name: registry name (kebab-case).
        cls: the ``torch.optim.Optimizer`` subclass.
        summary: the update rule in one line.
        claims: group name → :class:`Claim` at the default hyperparameters.
    """

    name: str
    cls: type[torch.optim.Optimizer]
    summary: str
    claims: dict[str, Claim] = field(default_factory=dict)

    def hyperparameters(self) -> dict[str, object]:
        """Keyword hyperparameters of the rule with their defaults (``params`` excluded)."""
        sig = inspect.signature(self.cls.__init__)
        return {
            n: p.default
            for n, p in sig.parameters.items()
            if n not in ("self", "params") and p.default is not inspect.Parameter.empty
        }


def _claims(orthogonal: Claim) -> dict[str, Claim]:
    return {
        "orthogonal": orthogonal,
        "signed-permutation": Claim(EQUIVARIANT, _SIGNED),
        "general-linear": Claim(BREAKS, _GL),
    }


_RULES = [
    Rule("gd", GD, "p ← p − η G", _claims(Claim(EQUIVARIANT, _GD))),
    Rule("heavy-ball", HeavyBall, "b ← μb + G; p ← p − η b", _claims(Claim(EQUIVARIANT, _GD))),
    Rule("nesterov", Nesterov, "b ← μb + G; p ← p − η(G + μb)", _claims(Claim(EQUIVARIANT, _GD))),
    Rule("adam", Adam, "p ← p − η m̂/(√v̂ + ε)", _claims(Claim(BREAKS, _ADAM))),
    Rule("adamw", AdamW, "adam + p ← p(1 − ηλ)", _claims(Claim(BREAKS, _ADAM))),
    Rule(
        "rmsprop",
        RMSprop,
        "v ← αv + (1−α)G²; p ← p − η G/(√v + ε)",
        _claims(Claim(BREAKS, _ENTRYWISE)),
    ),
    Rule(
        "signum", Signum, "m ← βm + (1−β)G; p ← p − η sign(m)", _claims(Claim(BREAKS, _ENTRYWISE))
    ),
    Rule("sign-sgd", SignSGD, "p ← p − η sign(G)", _claims(Claim(BREAKS, _ENTRYWISE))),
    Rule(
        "lion",
        Lion,
        "p ← p − η sign(β1 m + (1−β1)G); m ← β2 m + (1−β2)G",
        _claims(Claim(BREAKS, _ENTRYWISE)),
    ),
    Rule(
        "adafactor",
        Adafactor,
        "v̂ = R Cᵀ/mean(R); p ← p − η G/(√v̂ + ε)",
        _claims(Claim(BREAKS, _ADAFACTOR)),
    ),
    Rule(
        "scalar-adam",
        ScalarAdam,
        "p ← p − η m̂/(√mean(v̂) + ε), pooled over the group",
        _claims(Claim(EQUIVARIANT, _SCALAR)),
    ),
    Rule(
        "adam-p",
        AdamP,
        "p ← p − η m̂/((√v̂ + ε)^p (√mean v̂ + ε)^(1−p))",
        _claims(Claim(BREAKS, _DIAL, note="equivariant at p = 0 with mean='rms'")),
    ),
    Rule(
        "scaled-gd",
        ScaledGD,
        "U ← U − η G_U (VᵀV + λI)⁻¹, V ← V − η G_V (UᵀU + λI)⁻¹",
        {
            "orthogonal": Claim(EQUIVARIANT, _SCALED_GD),
            "signed-permutation": Claim(EQUIVARIANT, _SIGNED),
            "general-linear": Claim(BREAKS, _SCALED_GD, note="equivariant with damping=0"),
        },
    ),
    Rule("muon", Muon, "b ← μb + G; p ← p − η msign(b)", _claims(Claim(EQUIVARIANT, _MUON))),
    Rule(
        "shampoo",
        Shampoo,
        "p ← p − η (L+λI)^(−1/4) G (R+λI)^(−1/4)",
        _claims(Claim(EQUIVARIANT, _SHAMPOO)),
    ),
]

OPTIMIZERS: dict[str, Rule] = {r.name: r for r in _RULES}
"""The zoo: registry name → :class:`Rule`."""

CLAIMS: dict[str, dict[str, Claim]] = {r.name: r.claims for r in _RULES}
"""Rule name → group name → :class:`Claim` at the rule's default hyperparameters."""


def get_rule(name: str) -> Rule:
    """Look up a zoo rule by registry name.

    Raises:
        ValueError: unknown name; the message lists the known rules.
    """
    if name not in OPTIMIZERS:
        known = ", ".join(sorted(OPTIMIZERS))
        raise ValueError(f"make_optimizer: unknown rule {name!r}; known rules: {known}")
    return OPTIMIZERS[name]


def make_optimizer(name: str, params, **hyper) -> torch.optim.Optimizer:
    """Build a zoo rule by registry name.

    Args:
        name: registry name, e.g. ``"scalar-adam"``.
        params: parameters or param groups, as for any ``torch.optim.Optimizer``.
        **hyper: the rule's hyperparameters (see ``OPTIMIZERS[name].hyperparameters()``),
            including ``member_dims``.

    Returns:
        The optimizer.

    Raises:
        ValueError: unknown rule, unknown hyperparameter (the message lists the allowed ones)
            or a value out of range.

    Source: docs/protocols.md §1 (the zoo's exact rules); each class cites its paper.
    """
    rule = get_rule(name)
    allowed = rule.hyperparameters()
    unknown = sorted(set(hyper) - set(allowed))
    if unknown:
        raise ValueError(
            f"make_optimizer: unknown hyperparameter(s) {', '.join(unknown)} for rule {name!r}; "
            f"allowed: {', '.join(allowed)}"
        )
    return rule.cls(params, **hyper)


def claim(name: str, group: str, **hyper) -> Claim:
    """The claimed property of rule ``name`` under ``group`` at the given hyperparameters.

    Differs from ``CLAIMS[name][group]`` only where a hyperparameter changes the claim
    (Adam-p at ``p = 0`` with the RMS mean is orthogonally equivariant; scaled-gd with
    ``damping=0`` is equivariant under the general linear group).

    Raises:
        ValueError: unknown rule or group.
    """
    rule = get_rule(name)
    if group not in rule.claims:
        raise ValueError(f"claim: group={group!r}; allowed: {', '.join(CLAIM_GROUPS)}")
    if name == "adam-p" and group == "orthogonal":
        defaults = rule.hyperparameters()
        p = float(hyper.get("p", defaults["p"]))
        mean = hyper.get("mean", defaults["mean"])
        if p == 0 and mean == "rms":
            return Claim(EQUIVARIANT, _SCALAR, note="p = 0 with mean='rms' is scalar-adam")
    if name == "scaled-gd" and group == "general-linear":
        damping = hyper.get("damping", rule.hyperparameters()["damping"])
        if not isinstance(damping, str) and float(damping) == 0:
            return Claim(EQUIVARIANT, _SCALED_GD, note="damping=0: undamped ScaledGD")
    return rule.claims[group]

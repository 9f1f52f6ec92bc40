"""The optimizer zoo: every rule of docs/protocols.md §1 as a ``torch.optim.Optimizer``.

Every rule supports float32 and float64, param groups, ``state_dict``/``load_state_dict``,
closures, and ``member_dims`` (leading ensemble dims; every reduction is per member).
"""

from gaugelab.optim.adafactor import Adafactor
from gaugelab.optim.adam import Adam, AdamW, RMSprop
from gaugelab.optim.adam_p import AdamP, ScalarAdam
from gaugelab.optim.hybrid import Hybrid, is_hidden_matrix, muon_hybrid
from gaugelab.optim.members import MemberLearningRates, cosine_factor
from gaugelab.optim.muon import Muon
from gaugelab.optim.registry import (
    BREAKS,
    CLAIM_GROUPS,
    CLAIMS,
    EQUIVARIANT,
    OPTIMIZERS,
    Claim,
    Rule,
    claim,
    get_rule,
    make_optimizer,
)
from gaugelab.optim.scaled_gd import ScaledGD
from gaugelab.optim.sgd import GD, HeavyBall, Nesterov
from gaugelab.optim.shampoo import Shampoo
from gaugelab.optim.sign import Lion, SignSGD, Signum

__all__ = [
    "BREAKS",
    "CLAIMS",
    "CLAIM_GROUPS",
    "EQUIVARIANT",
    "GD",
    "OPTIMIZERS",
    "Adafactor",
    "Adam",
    "AdamP",
    "AdamW",
    "Claim",
    "HeavyBall",
    "Hybrid",
    "Lion",
    "Muon",
    "Nesterov",
    "RMSprop",
    "Rule",
    "ScalarAdam",
    "ScaledGD",
    "Shampoo",
    "SignSGD",
    "Signum",
    "claim",
    "get_rule",
    "is_hidden_matrix",
    "make_optimizer",
    "muon_hybrid",
]
__all__ += ["MemberLearningRates", "cosine_factor"]  # gaugelab.optim.members

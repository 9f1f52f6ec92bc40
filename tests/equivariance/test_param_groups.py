"""The adapter table: an optimizer that needs its parameter groups declared its own way runs
through its entry, fails in one line naming what it needed without one, and is never given
another layout silently; a randomised rule's verdict names the seed it could be given."""

import pytest
import torch
from tests.equivariance.user_optimizers import (
    ClosureFreeSGD,
    GeneratorNoisySGD,
    NeedsMuonGroups,
    NeedsMuonGroupsToo,
    SeededNoisySGD,
)

from gaugelab.equivariance import check_equivariance
from gaugelab.equivariance import param_groups as pg
from gaugelab.equivariance.failures import reason
from gaugelab.equivariance.problems import make_problem
from gaugelab.errors import OptimizerFailure

FAKE = f"{NeedsMuonGroups.__module__}:{NeedsMuonGroups.__qualname__}"
MUON = "pytorch_optimizer.optimizer.muon.base:MuonBase"
SMALL = {"steps": 3, "draws": 1}


@pytest.fixture
def muon_entry(monkeypatch):
    """The fake Muon-style rule given the table's Muon entry."""
    monkeypatch.setitem(pg.ADAPTERS, FAKE, pg.ADAPTERS[MUON])


def test_without_an_entry_the_check_fails_in_one_line_naming_the_group_key_it_needs():
    with pytest.raises(OptimizerFailure) as info:
        check_equivariance(NeedsMuonGroups, **SMALL)
    failure = info.value
    assert failure.phase == "construct"
    assert failure.reason.startswith("RuntimeError: Tensor.__contains__ only supports Tensor")
    assert failure.hint == (
        "it needs parameter groups that declare use_muon, and "
        "gaugelab.equivariance.param_groups.ADAPTERS has no entry for it"
    )
    assert "\n" not in str(failure)


def test_the_group_keys_a_constructor_requires_are_read_from_its_source():
    assert pg.needed_group_keys(NeedsMuonGroups) == ["use_muon"]
    assert pg.needed_group_keys(NeedsMuonGroupsToo) == ["use_muon"]  # its base's constructor
    assert pg.needed_group_keys(torch.optim.Adam) == []


@pytest.mark.usefixtures("muon_entry")
def test_with_an_entry_the_rule_runs_on_the_groups_it_declares():
    # the fake takes SGD steps in use_muon=True groups: SGD's verdicts, so the groups reached it
    orthogonal = check_equivariance(NeedsMuonGroups, group="orthogonal", **SMALL)
    assert orthogonal.verdict == "equivariant" and orthogonal.moved > 1e-3
    linear = check_equivariance(NeedsMuonGroups, group="general-linear", **SMALL)
    plain = check_equivariance(ClosureFreeSGD, group="general-linear", **SMALL)
    assert linear.verdict == "breaks"
    assert linear.distances == plain.distances  # the same rule on the same numbers


@pytest.mark.usefixtures("muon_entry")
def test_a_subclass_is_adapted_as_its_base():
    key, adapter = pg.find_adapter(NeedsMuonGroupsToo)
    assert key == FAKE and "use_muon" in adapter.needs
    assert check_equivariance(NeedsMuonGroupsToo, **SMALL).verdict == "equivariant"
    assert pg.find_adapter(torch.optim.SGD) is None


def test_muon_groups_flag_the_matrices_and_leave_the_rest_to_the_fallback():
    matrices = [torch.zeros(3, 2), torch.zeros(2, 2)]
    vector = torch.zeros(4)
    groups = pg.ADAPTERS[MUON].build(
        [matrices[0], vector, matrices[1]], ()
    )
    assert [(len(g["params"]), g["use_muon"]) for g in groups] == [(2, True), (1, False)]
    assert groups[0]["params"][1] is matrices[1] and groups[1]["params"][0] is vector
    assert all("lr" not in g for g in groups)  # the check's lr reaches every group


@pytest.mark.parametrize("problem", ["sensing", "attention"])
def test_lora_pairs_are_the_problems_gauge_factors_with_the_dimension_the_gauge_acts_on(problem):
    task = make_problem(problem, torch.float64, 0)
    params = task.initial()
    groups = pg.ADAPTERS["pytorch_optimizer.optimizer.lora_rite:LoRARite"].build(params, task.pairs)
    pairs = [g for g in groups if len(g["params"]) == 2]
    assert len(pairs) == 1 and len(groups) == 1 + len(params) - 2  # the rest one by one
    left, right = pairs[0]["params"]
    dims = pairs[0]["lora_l_dim"], pairs[0]["lora_r_dim"]
    # the gauge acts on the named dimension of each: its size is the group's k (heads × d_head)
    heads = 1 if problem == "sensing" else task.config.n_heads
    assert left.shape[dims[0]] == right.shape[dims[1]] == task.k * heads
    if problem == "attention":
        index = {id(p): i for i, p in enumerate(params)}
        assert [task.names[index[id(p)]] for p in (left, right)] == [
            "blocks.0.attn.q_proj.weight", "blocks.0.attn.k_proj.weight"
        ]  # fmt: skip


def test_galore_groups_declare_a_rank_below_every_matrix_side():
    params = make_problem("attention", torch.float64, 0).initial()
    (group,) = pg.ADAPTERS["pytorch_optimizer.optimizer.galore:GaLore"].build(params, ())
    assert group["rank"] == pg.GALORE_RANK < min(min(p.shape) for p in params)
    assert {"update_proj_gap", "scale", "projection_type"} <= set(group)


class FixedSeed(SeededNoisySGD):
    """What the hint says to write: every run constructed with the same seed."""

    def __init__(self, params, lr=1e-2):
        super().__init__(params, lr, seed=0)


def test_a_randomised_rule_is_nondeterministic_and_told_the_seed_it_takes():
    report = check_equivariance(SeededNoisySGD, **SMALL)
    assert report.verdict == "nondeterministic"
    assert report.explanation.endswith(
        "; it is randomised and its constructor takes seed: give every run the same one "
        "(seed=0), e.g. in a subclass, so that every twin draws the same numbers"
    )
    # following the hint: the identity twin is exactly 0, and the fixed noise, the same in
    # every basis, is no longer equivariant under rotations
    assert check_equivariance(FixedSeed, group="orthogonal", **SMALL).verdict == "breaks"


def test_a_generator_argument_is_named_with_how_to_seed_it():
    report = check_equivariance(GeneratorNoisySGD, **SMALL)
    assert report.verdict == "nondeterministic"
    assert "its constructor takes generator: give each run its own, seeded alike" in (
        report.explanation
    )


def test_a_rule_that_is_not_randomised_gets_no_seed_hint():
    report = check_equivariance(ClosureFreeSGD, **SMALL)
    assert "seed" not in report.explanation


def test_an_error_met_under_torch_compile_reads_as_the_traced_calls_own_error():
    exc = RuntimeError(
        "RuntimeError when making fake tensor call\n\nExplanation: Dynamo failed to run FX node "
        "with fake tensors: call_function einsum(...): got RuntimeError('expected scalar type "
        "torch.float64 but found torch.float32')\n  Hint: ..."
    )
    assert reason(exc) == (
        "RuntimeError: expected scalar type torch.float64 but found torch.float32 "
        "(under torch.compile)"
    )
    assert reason(KeyError("betas")) == "KeyError: 'betas'"


def test_pytorch_optimizers_muon_and_lora_rite_run_on_the_groups_the_table_declares():
    """Where pytorch-optimizer is installed (the extra gaugelab[atlas]): its Muon, which fails on
    a plain list, runs; LoRA-RITE, given its factor pairs, is equivariant under GL(k), as its
    paper claims (yen2025lorarite), once it no longer skips every step of this problem."""
    pytest.importorskip("pytorch_optimizer")
    muon = check_equivariance("pytorch_optimizer:Muon", **SMALL)
    assert muon.verdict == "breaks"  # bfloat16 Newton–Schulz: a gauge twin at its round-off
    assert 1e-4 < muon.worst("gauge")[0] < 1e-2
    rite = check_equivariance("pytorch_optimizer:LoRARite", group="general-linear",
                              update_skipping=0.0, **SMALL)  # fmt: skip
    assert rite.verdict == "equivariant" and rite.moved > 1e-1

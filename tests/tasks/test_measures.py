"""gaugelab.tasks.measures: the effective rank's two named conventions on seed 003's worked
examples (§0x00I, §0x04I–J), and the one implementation it shares with lowrank.spectra."""

import math

import pytest
import torch

from gaugelab.lowrank.spectra.ranks import effective_rank_energy, effective_rank_roy_vetterli
from gaugelab.tasks import effective_rank

F64 = torch.float64
EXACT = 1e-11

pytestmark = pytest.mark.usefixtures("strict_dtypes")

# §0x04D's fixed 4×6 matrix ΔW*, σ = (4, 3, 2, 1): the matrix of §0x04I's policy table
DW = torch.tensor(
    [[4, 0, 0, 0, 0, 0], [0, 3, 0, 0, 0, 0], [0, 0, 2, 0, 0, 0], [0, 0, 0, 1, 0, 0]], dtype=F64
)


def entropy_rank(weights: list[float]) -> float:
    """``exp(−Σ p ln p)``, ``p = w / Σw``, in plain float arithmetic (the closed form)."""
    total = sum(weights)
    return math.exp(-sum(w / total * math.log(w / total) for w in weights))


def test_seed_0x04J_energy_effective_rank_of_4321_is_2_9402():
    # p = (16, 9, 4, 1)/30: seed 003's r_ent (§0x00I), "entropy-energy rank 2.9402" (§0x04I)
    got = float(effective_rank(DW, convention="energy"))
    assert got == pytest.approx(entropy_rank([16, 9, 4, 1]), abs=EXACT)
    assert got == pytest.approx(2.9402, abs=5e-5) and round(got, 4) == 2.9402
    assert float(effective_rank(DW)) == got  # the plain name is the seed's rule


def test_seed_0x04J_roy_vetterli_effective_rank_of_4321_is_3_5961():
    # p = (4, 3, 2, 1)/10: "r_eff^RV ≈ 3.5961"
    got = float(effective_rank(DW, convention="roy_vetterli"))
    assert got == pytest.approx(entropy_rank([4, 3, 2, 1]), abs=EXACT)
    assert round(got, 4) == 3.5961
    # "They are not the same statistic"
    assert abs(got - float(effective_rank(DW, convention="energy"))) > 0.5


@pytest.mark.parametrize("convention", ["energy", "roy_vetterli"])
def test_seed_0x04J_zero_matrix_has_effective_rank_zero(convention):
    # zero mass: effective rank 0, no division, no invented distribution
    got = effective_rank(torch.zeros(4, 6, dtype=F64), convention=convention)
    assert got.dtype == F64 and float(got) == 0.0 and not torch.isnan(got)


def test_tasks_and_lowrank_name_the_same_statistics_alike():
    # one implementation: the tasks value is the lowrank RankReport's value, per convention
    batch = torch.stack([DW, 2 * DW, torch.zeros_like(DW)])  # [3, 4, 6]
    for convention, policy in (
        ("energy", effective_rank_energy),
        ("roy_vetterli", effective_rank_roy_vetterli),
    ):
        got = effective_rank(batch, convention=convention)
        reports = policy(batch, matrix_id="dw")
        want = torch.tensor([r.value for r in reports], dtype=F64)
        torch.testing.assert_close(got, want, rtol=0, atol=EXACT)


def test_effective_rank_refuses_an_unknown_convention():
    with pytest.raises(ValueError, match=r"convention='entropy'.*'energy', 'roy_vetterli'"):
        effective_rank(DW, convention="entropy")

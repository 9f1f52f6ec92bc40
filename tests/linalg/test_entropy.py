"""gaugelab.linalg.entropy: the entropy effective rank of a spectrum, both conventions, on seed
003 §0x04J's spectrum (4, 3, 2, 1)."""

import pytest
import torch

from gaugelab.linalg import ENTROPY_CONVENTIONS, entropy_effective_rank

F64 = torch.float64

pytestmark = pytest.mark.usefixtures("strict_dtypes")


def test_seed_0x04J_both_conventions_on_the_spectrum_4321():
    sigma = torch.tensor([4.0, 3.0, 2.0, 1.0], dtype=F64)
    energy = entropy_effective_rank(sigma, convention="energy")
    rv = entropy_effective_rank(sigma, convention="roy_vetterli")
    # p = σ²/30 and p = σ/10
    for value, p in ((energy, sigma**2 / 30), (rv, sigma / 10)):
        torch.testing.assert_close(value, torch.exp(-(p * p.log()).sum()), rtol=0, atol=1e-11)
    assert round(float(energy), 4) == 2.9402 and round(float(rv), 4) == 3.5961
    assert ENTROPY_CONVENTIONS == ("energy", "roy_vetterli")


def test_zero_terms_do_not_count_and_no_mass_gives_zero_batched():
    sigma = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]], dtype=F64)  # [2, 3]
    for convention in ENTROPY_CONVENTIONS:
        got = entropy_effective_rank(sigma, convention=convention)
        assert got.shape == (2,) and got.dtype == F64
        assert got.tolist() == [2.0, 0.0]


def test_an_unknown_convention_is_refused():
    with pytest.raises(ValueError, match="convention='squared'"):
        entropy_effective_rank(torch.ones(2, dtype=F64), convention="squared")

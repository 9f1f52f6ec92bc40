"""Tests for gaugelab.linalg.psd: psd_power with damping and an eigenvalue floor."""

import pytest
import torch

from gaugelab.linalg import psd_power

EXACT = 1e-11
LOOSE = 1e-9
F64 = torch.float64


def spd(n, seed=0, batch=()):
    B = torch.randn(*batch, n, n, generator=torch.Generator().manual_seed(seed), dtype=F64)
    return B @ B.mT / n + torch.eye(n, dtype=F64)  # eigenvalues in [1, ~5]: well conditioned


def close(actual, expected, atol=EXACT):
    torch.testing.assert_close(actual, expected, rtol=0, atol=atol)


def test_square_root_squared_is_s():
    S = spd(6, seed=1)
    root = psd_power(S, 0.5)
    close(root @ root, S)
    close(root, root.mT)


def test_inverse_fourth_root_four_times_times_s_is_identity():
    S = spd(6, seed=2)
    R = psd_power(S, -0.25)
    close(R @ R @ R @ R @ S, torch.eye(6, dtype=F64))


def test_damping_adds_lambda_identity_before_the_power():
    S = spd(5, seed=3)
    lam = 0.7
    close(psd_power(S, -0.25, damping=lam), psd_power(S + lam * torch.eye(5, dtype=F64), -0.25))
    # diagonal case in closed form: (d + λ)^p
    d = torch.tensor([0.0, 1.0, 4.0], dtype=F64)
    close(psd_power(torch.diag(d), -0.5, damping=1.0), torch.diag((d + 1.0) ** -0.5))


def test_clamp_floors_eigenvalues_on_the_null_space():
    v = torch.tensor([[1.0], [2.0], [2.0], [0.0]], dtype=F64)  # |v| = 3
    S = v @ v.mT  # rank 1, eigenvalues 9, 0, 0, 0
    P = S / 9.0  # projector onto span(v)
    clamp = 1e-6
    # 9^(-1/4) on span(v); clamp^(-1/4) ≈ 31.62 on the 3-dimensional null space
    expected = 9.0**-0.25 * P + clamp**-0.25 * (torch.eye(4, dtype=F64) - P)
    close(psd_power(S, -0.25, clamp=clamp), expected, atol=LOOSE)


def test_only_the_symmetric_part_is_used():
    S = spd(4, seed=4)
    K = torch.randn(4, 4, generator=torch.Generator().manual_seed(5), dtype=F64)
    close(psd_power(S + (K - K.mT), -0.25), psd_power(S, -0.25))


def test_psd_power_batched_equals_per_matrix_loop():
    S = spd(4, seed=6, batch=(2, 3))
    batched = psd_power(S, -0.25, damping=0.1)
    looped = torch.stack(
        [torch.stack([psd_power(S[i, j], -0.25, damping=0.1) for j in range(3)]) for i in range(2)]
    )
    close(batched, looped)


def test_psd_power_keeps_float32_as_float32():
    S = spd(4, seed=7).float()
    assert psd_power(S, -0.25).dtype == torch.float32


@pytest.mark.parametrize(
    ("S", "kwargs", "match"),
    [
        (torch.eye(3, 2, dtype=F64), {"power": 0.5}, r"psd_power: S .*\(3, 2\)"),
        (torch.ones(3, dtype=F64), {"power": 0.5}, r"psd_power: S .*\(3,\)"),
        (torch.eye(3, dtype=F64), {"power": 0.5, "damping": -0.1}, r"damping .*-0\.1"),
        (torch.eye(3, dtype=F64), {"power": -0.25, "clamp": 0.0}, r"clamp .*0\.0"),
        (torch.eye(3, dtype=F64), {"power": 0.5, "clamp": -1.0}, r"clamp .*-1\.0"),
    ],
)
def test_psd_power_rejects_bad_arguments(S, kwargs, match):
    with pytest.raises(ValueError, match=match):
        psd_power(S, **kwargs)


def test_zero_clamp_is_allowed_for_non_negative_powers():
    close(psd_power(torch.zeros(3, 3, dtype=F64), 0.5, clamp=0.0), torch.zeros(3, 3, dtype=F64))

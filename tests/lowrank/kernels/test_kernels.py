"""Tests of gaugelab.lowrank.kernels.explanation: the seed's exact fixtures (§0x09E–H), the
closed-form
LoRA Jacobians against autograd, and the probe estimators against the dense objects."""

from __future__ import annotations

import copy
from fractions import Fraction

import pytest
import torch
from torch import nn

from gaugelab.lowrank.kernels.explanation import (
    KernelProbes,
    Metric,
    StackedOutputs,
    adam_metric,
    balanced_factors,
    empirical_jacobian,
    empirical_kernel,
    existence_rank_bound,
    flatten,
    full_weight_jacobian,
    full_weight_kernel,
    is_orthonormal,
    jacobian_drift,
    kernel_alignment,
    kernel_drift,
    kernel_matvec,
    landscape_rank_bound,
    linearization_residual,
    linearized_outputs,
    lora_factor_jacobians,
    lora_kernel,
    restricted_kernel,
    sign_kernel,
    unflatten,
    vec,
)
from gaugelab.models import Transformer, TransformerConfig
from gaugelab.models.lora import inject_lora

D = torch.float64


def t(rows) -> torch.Tensor:
    return torch.tensor([[float(Fraction(x)) for x in row] for row in rows], dtype=D)


def lora_J(X, B, A, s=1.0) -> torch.Tensor:
    """``[J_B J_A]``, parameter order ``[vec(B); vec(A)]``."""
    return torch.cat(lora_factor_jacobians(X, B, A, s), dim=1)


# --- the exact fixtures of seed 003 §0x09E–0x09H ------------------------------------------

X2, A0, B0 = torch.eye(2, dtype=D), torch.eye(2, dtype=D), torch.zeros(2, 2, dtype=D)
T = t([[1, 1], [0, 2]])
ETA = 0.25


def test_init_kernel_equals_full_weight_kernel():
    # §0x09E: J0 = [I_4 0], K_LoRA,0 = I_4 = K_W
    J0 = lora_J(X2, B0, A0)
    assert torch.equal(J0, torch.cat([torch.eye(4, dtype=D), torch.zeros(4, 4, dtype=D)], 1))
    assert torch.equal(empirical_kernel(J0), torch.eye(4, dtype=D))
    assert torch.equal(full_weight_kernel(X2, 2), torch.eye(4, dtype=D))


def fixture_layer(B: torch.Tensor, A: torch.Tensor) -> StackedOutputs:
    """§0x09E's layer ``Y = (W0 + s B A) X`` with ``s = 1`` (α = r = 2) on the probe ``X = I_2``
    (one example per column, so the rows of ``X.T``), parameters declared ``[B, A]``."""
    model = nn.Sequential(nn.Linear(2, 2, bias=False)).to(D)
    inject_lora(model, ["0"], 2, 2.0, init="given", factors={"0": (A, B)})
    return StackedOutputs(model, X2.T.contiguous(), selector="the layer's outputs",
                          parameters=["0.lora_B", "0.lora_A"])  # fmt: skip


def test_seed_0x09E_both_jacobians_have_the_declared_order_vec_b_then_vec_a():
    # J0 = [I_4 0] under [vec(B); vec(A)], column-major vec (row-major B would permute I_4)
    want0 = torch.cat([torch.eye(4, dtype=D), torch.zeros(4, 4, dtype=D)], 1)
    out = fixture_layer(B0, A0)
    assert out.axes()["order"] == "example_then_output" and out.n_parameters == 8
    J0 = empirical_jacobian(out)
    assert torch.equal(lora_J(X2, B0, A0), want0)
    assert torch.allclose(J0, want0, rtol=0, atol=1e-11)
    # after one plain-SGD step (B1 = T/4, A1 = I): J_B,1 = I_4 and J_A,1 = I_2 ⊗ B1, whose
    # columns tell vec(A) from a row-major flattening of A (B1 is not symmetric)
    B1 = ETA * T
    want1 = torch.cat([torch.eye(4, dtype=D), torch.block_diag(B1, B1)], 1)
    assert torch.allclose(lora_J(X2, B1, A0), want1, rtol=0, atol=1e-11)
    J1 = empirical_jacobian(fixture_layer(B1, A0))
    assert torch.allclose(J1, want1, rtol=0, atol=1e-11)
    # the parameter vector in the same order: flatten is [vec(B); vec(A)] and unflatten inverts
    theta1 = fixture_layer(B1, A0).theta()
    flat = flatten(theta1, ["0.lora_B", "0.lora_A"])
    assert torch.equal(flat, torch.cat([vec(B1), vec(A0)]))
    back = unflatten(flat, {k: theta1[k] for k in ("0.lora_B", "0.lora_A")})
    assert all(torch.equal(back[k], theta1[k]) for k in back)
    # and J θ̇ is the output change along a factor velocity, in either path's coordinates
    dB, dA = t([[1, 2], [3, 4]]), t([[5, 6], [7, 8]])
    step = torch.cat([vec(dB), vec(dA)])
    assert torch.allclose(J1 @ step, vec(dB @ A0 @ X2 + B1 @ dA @ X2), rtol=0, atol=1e-11)


def test_first_step_drift_squares_are_the_seeds_fractions():
    # §0x09E: B1 = T/4, A1 = I; the kernel is two copies of [[9/8, 1/8], [1/8, 5/4]]
    B1 = ETA * T
    J0, J1 = lora_J(X2, B0, A0), lora_J(X2, B1, A0)
    K0, K1 = empirical_kernel(J0), empirical_kernel(J1)
    block = t([[Fraction(9, 8), Fraction(1, 8)], [Fraction(1, 8), Fraction(5, 4)]])
    assert torch.allclose(K1, torch.block_diag(block, block), rtol=0, atol=1e-15)
    assert torch.allclose(K1, lora_kernel(X2, B1, A0, 1.0), rtol=0, atol=1e-15)
    assert jacobian_drift(J1, J0) ** 2 == pytest.approx(3 / 16, abs=1e-11)  # ‖I⊗B1‖²/4
    assert kernel_drift(K1, K0) ** 2 == pytest.approx(7 / 128, abs=1e-11)
    assert kernel_alignment(K1, K0) ** 2 == pytest.approx(361 / 366, abs=1e-11)
    # the first output step is exactly tangent (A did not move): R_lin = 0
    Y0, Y1 = vec(B0 @ A0 @ X2), vec(B1 @ A0 @ X2)
    delta = torch.cat([vec(B1 - B0), vec(A0 - A0)])
    assert linearization_residual(Y1, Y0, Y0 + J0 @ delta) == 0.0


def test_second_step_separates_tangent_frozen_and_exact():
    # §0x09F: state-one gradients, then the three state-two predictions and their errors
    B1 = (ETA * T).requires_grad_(True)
    A1 = A0.clone().requires_grad_(True)
    loss = 0.5 * ((B1 @ A1 @ X2 - T) ** 2).sum()
    gB, gA = torch.autograd.grad(loss, (B1, A1))
    assert torch.allclose(gB, t([["-3/4", "-3/4"], [0, "-3/2"]]), atol=1e-15)
    assert torch.allclose(gA, t([["-3/16", "-3/16"], ["-3/16", "-15/16"]]), atol=1e-15)
    B1, A1 = B1.detach(), A1.detach()
    dB, dA = -ETA * gB, -ETA * gA
    Y1 = vec(B1 @ A1 @ X2)
    exact = vec((B1 + dB) @ (A1 + dA) @ X2)
    tangent = Y1 + lora_J(X2, B1, A1) @ torch.cat([vec(dB), vec(dA)])
    frozen = Y1 - ETA * empirical_kernel(lora_J(X2, B0, A0)) @ (Y1 - vec(T))
    assert torch.allclose(frozen, vec(t([["7/16", "7/16"], [0, "7/8"]])), atol=1e-15)
    assert torch.allclose(tangent, vec(t([["59/128", "65/128"], ["3/128", "127/128"]])),
                          atol=1e-15)  # fmt: skip
    assert torch.allclose(exact, vec(t([["245/512", "287/512"], ["21/512", "553/512"]])),
                          atol=1e-15)  # fmt: skip
    assert float(((exact - tangent) ** 2).sum()) == pytest.approx(729 / 65536, abs=1e-12)
    assert float(((exact - frozen) ** 2).sum()) == pytest.approx(3969 / 65536, abs=1e-12)


def test_rank_one_deletes_probe_directions():
    # §0x09G: r = 1, A0 = [1 0], B0 = 0: K_LoRA,0 = diag(1, 1, 0, 0) against K_W = I_4
    A, B = t([[1, 0]]), torch.zeros(2, 1, dtype=D)
    J = lora_J(X2, B, A)
    expected = torch.zeros(4, 4, dtype=D)
    expected[0, 0] = expected[1, 1] = 1
    assert torch.equal(J, expected)
    K, K_W = empirical_kernel(J), full_weight_kernel(X2, 2)
    assert torch.equal(K, torch.diag(t([[1, 1, 0, 0]])[0]))
    assert (torch.linalg.matrix_rank(K), torch.linalg.matrix_rank(K_W)) == (2, 4)
    assert float(((K - K_W) ** 2).sum()) == 2.0


def test_sign_kernels_of_the_seed_probe():
    # §0x09H
    J = t([[1, 2], [3, 4]])
    assert torch.equal(empirical_kernel(J), t([[5, 11], [11, 25]]))
    assert torch.equal(sign_kernel(J), t([[3, 3], [7, 7]]))
    assert torch.equal(sign_kernel(J, symmetric=True), t([[2, 2], [2, 2]]))
    assert not torch.equal(sign_kernel(J), sign_kernel(J).T)  # asymmetric analog


# --- closed forms against autograd ---------------------------------------------------------


def test_lora_factor_jacobians_match_autograd_column_major():
    g = torch.Generator().manual_seed(0)
    m, n, r, N, s = 3, 4, 2, 5, 0.7
    X, B, A = (torch.randn(*shape, generator=g, dtype=D) for shape in ((n, N), (m, r), (r, n)))
    W0 = torch.randn(m, n, generator=g, dtype=D)

    def y_of_b(vb):
        return vec((W0 + s * vb.view(r, m).T @ A) @ X)

    def y_of_a(va):
        return vec((W0 + s * B @ va.view(n, r).T) @ X)

    J_B, J_A = lora_factor_jacobians(X, B, A, s)
    assert torch.allclose(J_B, torch.autograd.functional.jacobian(y_of_b, vec(B)), atol=1e-12)
    assert torch.allclose(J_A, torch.autograd.functional.jacobian(y_of_a, vec(A)), atol=1e-12)
    assert torch.allclose(lora_kernel(X, B, A, s), J_B @ J_B.T + J_A @ J_A.T, atol=1e-11)
    J_W = torch.autograd.functional.jacobian(lambda vw: vec(vw.view(n, m).T @ X), vec(W0))
    assert torch.allclose(full_weight_jacobian(X, m), J_W, atol=1e-12)
    assert torch.allclose(full_weight_kernel(X, m), J_W @ J_W.T, atol=1e-11)


def test_empirical_jacobian_of_a_lora_layer_is_the_closed_form():
    g = torch.Generator().manual_seed(1)
    m, n, r, N = 3, 4, 2, 5
    model = nn.Sequential(nn.Linear(n, m, bias=False)).to(D)
    layer = inject_lora(model, ["0"], r, 3.0, seed=0)["0"]
    with torch.no_grad():
        layer.lora_B.normal_(generator=g)
    X = torch.randn(N, n, generator=g, dtype=D)  # examples as rows
    out = StackedOutputs(model, X, selector="the layer's outputs")
    assert out.names == ["0.lora_A", "0.lora_B"] and out.size == N * m
    J = empirical_jacobian(out)  # columns: A then B (the declared order), each column-major
    J_B, J_A = lora_factor_jacobians(X.T, layer.lora_B.detach(), layer.lora_A.detach(),
                                     layer.scale)  # fmt: skip
    assert torch.allclose(J[:, : r * n], J_A, atol=1e-12)
    assert torch.allclose(J[:, r * n :], J_B, atol=1e-12)
    # restricting to the B coordinates is the fixed-random-feature kernel J_B J_Bᵀ
    P = torch.eye(out.n_parameters, dtype=D)[:, r * n :]
    assert is_orthonormal(P) and not is_orthonormal(2 * P)
    assert torch.allclose(restricted_kernel(J, P), J_B @ J_B.T, atol=1e-11)
    assert torch.allclose(restricted_kernel(J, 2 * P), 4 * (J_B @ J_B.T), atol=1e-11)


# --- estimators against the dense objects --------------------------------------------------

TINY = TransformerConfig(n_layers=1, d_model=8, n_heads=2, d_head=4, d_mlp=16, d_vocab=7,
                         n_ctx=4)  # fmt: skip


def tiny_pair(seed: int = 0, *, plain: bool = False):
    """A LoRA Transformer at initialization and a moved copy (every factor perturbed);
    ``plain``: its attention runs the plain-ops path (SDPA has no double backward)."""
    model = Transformer(TINY, seed=seed, dtype=D)
    for module in model.modules():
        if plain and hasattr(module, "use_sdpa"):
            module.use_sdpa = False
    inject_lora(model, ["q_proj", "v_proj", "fc_in"], 2, 4.0, seed=seed)
    inputs = torch.randint(0, 7, (6, 4), generator=torch.Generator().manual_seed(seed))
    out = StackedOutputs(model, inputs)
    theta0 = out.theta()
    g = torch.Generator().manual_seed(seed + 1)
    theta_t = {k: v + 0.3 * torch.randn(v.shape, generator=g, dtype=D) for k, v in theta0.items()}
    return out, theta0, theta_t


def test_sdpa_has_no_forward_mode_and_the_fallback_is_recorded():
    out, theta0, theta_t = tiny_pair()
    tangent = {k: theta_t[k] - theta0[k] for k in theta0}
    _, jv = out.jvp(theta0, tangent)
    assert out.forward_mode in ("jvp", "plain attention")
    if out.forward_mode == "plain attention":
        assert "NotImplementedError" in out.fallback
    J = empirical_jacobian(out, theta0)
    assert torch.allclose(jv, J @ flatten(tangent, out.names), atol=1e-10)
    assert out.axes()["order"] == "example_then_output" and out.axes()["dropout"] is False


def test_double_vjp_mode_gives_the_same_jvp():
    out, theta0, theta_t = tiny_pair(3, plain=True)
    tangent = {k: theta_t[k] - theta0[k] for k in theta0}
    J = empirical_jacobian(out, theta0)
    out.forward_mode = "double vjp"
    _, jv = out.jvp(theta0, tangent)
    assert torch.allclose(jv, J @ flatten(tangent, out.names), atol=1e-10)


def test_kernel_matvec_applies_the_metric():
    out, theta0, _ = tiny_pair(1, plain=True)
    J = empirical_jacobian(out, theta0)
    z = torch.randn(out.size, generator=torch.Generator().manual_seed(5), dtype=D)
    assert torch.allclose(kernel_matvec(out, theta0, z, metric=Metric.identity()),
                          empirical_kernel(J) @ z, atol=1e-10)  # fmt: skip
    diag = {k: torch.rand(v.shape, generator=torch.Generator().manual_seed(6), dtype=D)
            for k, v in theta0.items()}  # fmt: skip
    metric = Metric("diagonal", diag)
    got = kernel_matvec(out, theta0, z, metric=metric)
    want = empirical_kernel(J, flatten(diag, out.names)) @ z
    assert torch.allclose(got, want, atol=1e-10)
    assert not torch.allclose(got, empirical_kernel(J) @ z, atol=1e-3)  # not silently J Jᵀ


def test_probe_estimates_agree_with_the_exact_diagnostics_within_their_error():
    out, theta0, theta_t = tiny_pair(2, plain=True)
    J0, Jt = empirical_jacobian(out, theta0), empirical_jacobian(out, theta_t)
    K0, Kt = empirical_kernel(J0), empirical_kernel(Jt)
    F0, F_lin = linearized_outputs(out, theta0, theta_t)
    with torch.no_grad():
        Ft = out(theta_t)
    est = KernelProbes(out, theta0, probes=48, seed=0).estimate(theta_t, metric=Metric.identity())
    delta = flatten(theta_t, out.names) - flatten(theta0, out.names)
    assert torch.allclose(F_lin, F0 + J0 @ delta, atol=1e-10)
    assert est.r_lin == pytest.approx(linearization_residual(Ft, F0, F_lin), rel=1e-9)
    exact = {"d_j": jacobian_drift(Jt, J0), "d_k": kernel_drift(Kt, K0),
             "a_k": kernel_alignment(Kt, K0)}  # fmt: skip
    for name, value in exact.items():
        e = getattr(est, name)
        assert 0 < e.stderr < 0.2 * abs(value), (name, e, value)
        assert abs(e.value - value) <= 4 * e.stderr, (name, e, value)
    assert est.probes == 48 and est.metric == "identity" and est.distribution == "rademacher"


def test_adam_metric_after_one_step_is_one_over_abs_gradient_plus_eps():
    model = nn.Linear(3, 2).to(D)
    params = dict(model.named_parameters())
    opt = torch.optim.Adam(params.values(), lr=0.1, eps=1e-3)
    with pytest.raises(ValueError, match="no Adam state"):
        adam_metric(opt, params)
    loss = model(torch.ones(4, 3, dtype=D)).pow(2).sum()
    loss.backward()
    grads = {k: p.grad.clone() for k, p in params.items()}
    opt.step()
    metric = adam_metric(opt, params)
    assert metric.name == "adam step 1"
    for k, g in grads.items():  # v̂_1 = g²
        assert torch.allclose(metric.diagonal[k], 1 / (g.abs() + 1e-3), rtol=1e-12)


# --- the NTK full-update problem (§0x0AK–0x0AM) --------------------------------------------


def test_triangular_rank_counts():
    # §0x0AM: K N = 6 → s = 3 (3·4/2 = 6), r = 4 (4·5/2 = 10 > 6); §0x0AO: K N = 64 → r = 11
    assert (existence_rank_bound(2, 3), landscape_rank_bound(2, 3)) == (3, 4)
    assert (existence_rank_bound(2, 32), landscape_rank_bound(2, 32)) == (10, 11)
    with pytest.raises(ValueError, match="n_examples=0"):
        existence_rank_bound(2, 0)


def test_balanced_factors_attain_the_nuclear_norm():
    delta = torch.randn(5, 3, generator=torch.Generator().manual_seed(0), dtype=D)
    u, v = balanced_factors(delta)
    assert torch.allclose(u @ v.T, delta, atol=1e-12)
    nuclear = float(torch.linalg.matrix_norm(delta, ord="nuc"))
    assert 0.5 * float(u.pow(2).sum() + v.pow(2).sum()) == pytest.approx(nuclear, rel=1e-12)


# --- bad input -----------------------------------------------------------------------------


def test_bad_inputs_name_the_argument():
    out, theta0, _ = tiny_pair()
    with pytest.raises(ValueError, match="max_entries"):
        empirical_jacobian(out, max_entries=10)
    with pytest.raises(ValueError, match="probes=1"):
        KernelProbes(out, theta0, probes=1)
    with pytest.raises(ValueError, match=r"allowed: \[42\]"):
        out.vjp(theta0, torch.zeros(3, dtype=D))
    with pytest.raises(ValueError, match="not parameters of the model"):
        StackedOutputs(copy.deepcopy(out.model), out.inputs, parameters=["nope"])
    with pytest.raises(ValueError, match="non-finite"):
        kernel_drift(torch.full((2, 2), float("nan")), torch.eye(2))
    with pytest.raises(ValueError, match="A shape"):
        lora_factor_jacobians(X2, B0, torch.eye(3, dtype=D), 1.0)

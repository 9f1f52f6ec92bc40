"""Tests for gaugelab.lowrank.composition.ledger (seed 003 §0x05): the concatenated factorization,
the
rank ledger, compression, interference, the gated counterexample, staged expansion, and
composed adapters in PEFT format (read back by PEFT itself)."""

import dataclasses
import json
import math
import os

import pytest
import torch

from gaugelab.adapters import Adapter, AdapterModule
from gaugelab.lowrank.composition.adapters import compose_adapters
from gaugelab.lowrank.composition.interference import frobenius_inner
from gaugelab.lowrank.composition.ledger import (
    compose_static,
    compress,
    interference,
    staged_expansion_report,
    static_merge_exists,
)
from gaugelab.lowrank.spectra.factored import as_update
from gaugelab.models import Transformer, TransformerConfig
from gaugelab.models.lora import inject_lora

pytestmark = pytest.mark.usefixtures("strict_dtypes")

EXACT = 1e-11
F64 = torch.float64
F = torch.eye(4, dtype=F64)  # output basis f_1 … f_4 of R⁴
E = torch.eye(6, dtype=F64)  # input basis e_1 … e_6 of R⁶


def rank_one(f, e, c=1.0):
    """``c·f eᵀ`` as factors ``(B [4, 1], A [1, 6])``."""
    return (c * f[:, None], e[None, :])


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=F64)


def test_concatenated_factorization_of_2f1e1_plus_3f2e2_is_exact_with_rank_two():
    comp = compose_static([rank_one(F[0], E[0]), rank_one(F[1], E[1])], [2.0, 3.0])
    want = torch.zeros(4, 6, dtype=F64)
    want[0, 0], want[1, 1] = 2.0, 3.0
    torch.testing.assert_close(comp.delta(), want, rtol=0, atol=0)
    torch.testing.assert_close(comp.B, F[:, :2], rtol=0, atol=0)  # [f1 f2]
    torch.testing.assert_close(comp.A, torch.stack([2 * E[0], 3 * E[1]]), rtol=0, atol=0)
    assert comp.max_abs_difference == 0.0  # both construction paths agree exactly
    assert (comp.measured_rank, comp.rank_bound) == (2, 2)


LEDGER = {
    # case: (left, right, rank of sum, rank B_cat, rank A_cat)
    "aligned amplification": (rank_one(F[0], E[0]), rank_one(F[0], E[0], 2.0), 1, 1, 1),
    "new row, shared column": (rank_one(F[0], E[0]), rank_one(F[0], E[1]), 1, 1, 2),
    "new column, shared row": (rank_one(F[0], E[0]), rank_one(F[1], E[0]), 1, 2, 1),
    "independent both sides": (rank_one(F[0], E[0]), rank_one(F[1], E[1]), 2, 2, 2),
    "exact cancellation": (rank_one(F[0], E[0]), rank_one(F[0], E[0], -1.0), 0, 1, 1),
}


@pytest.mark.parametrize("case", list(LEDGER))
def test_composition_rank_ledger_1_1_1_2_0(case):
    left, right, rank, rank_b, rank_a = LEDGER[case]
    comp = compose_static([left, right])
    assert comp.measured_rank == rank
    assert (comp.rank_b_cat, comp.rank_a_cat) == (rank_b, rank_a)
    assert comp.rank_bound == min(rank_b, rank_a, 2) >= comp.measured_rank
    assert comp.max_abs_difference <= EXACT


def test_scales_are_per_source_and_enter_the_down_factor():
    B1, A1, B2, A2 = randn(5, 2), randn(2, 7, seed=1), randn(5, 3, seed=2), randn(3, 7, seed=3)
    comp = compose_static([(B1, A1, 0.5), (B2, A2, 4 / 3**0.5)], [1.0, -2.0])
    want = 0.5 * B1 @ A1 - 2.0 * (4 / 3**0.5) * B2 @ A2
    torch.testing.assert_close(comp.delta(), want, rtol=0, atol=EXACT)
    assert comp.scales == (0.5, 4 / 3**0.5) and comp.ranks == (2, 3)


def test_svd_compression_matches_the_dense_truncation_and_its_tail():
    parts = [(randn(9, 3, seed=s), randn(3, 8, seed=s + 10), 0.7) for s in range(3)]
    comp = compose_static(parts)
    small = compress(comp, 4)
    U, S, Vh = torch.linalg.svd(comp.delta())
    torch.testing.assert_close(small.B @ small.A, U[:, :4] @ torch.diag(S[:4]) @ Vh[:4],
                               rtol=0, atol=1e-10)  # fmt: skip
    assert abs(small.residual_squared - float(S[4:].square().sum())) <= 1e-10
    assert abs(small.relative_residual - float(S[4:].square().sum() / S.square().sum())) <= 1e-12


def test_frobenius_cross_term_and_sampled_output_interference():
    d1 = (randn(6, 2), randn(2, 5, seed=1), 1.5)
    d2 = (randn(6, 3, seed=2), randn(3, 5, seed=3), -0.5)
    X = randn(40, 5, seed=4)
    res = interference(d1, d2, X)
    D1, D2 = 1.5 * d1[0] @ d1[1], -0.5 * d2[0] @ d2[1]
    assert abs(res.cross_term - 2 * float((D1 * D2).sum())) <= EXACT  # 2⟨ΔW1, ΔW2⟩_F
    assert abs(res.sum_squared - float((D1 + D2).square().sum())) <= EXACT
    assert abs(res.sum_squared - (res.norm1_squared + res.norm2_squared + res.cross_term)) <= EXACT
    Y1, Y2 = X @ D1.T, X @ D2.T
    assert abs(res.output_cross_term - 2 * float((Y1 * Y2).sum()) / 40) <= EXACT
    assert abs(res.output_sum_squared - float((Y1 + Y2).square().sum()) / 40) <= EXACT
    cancel = interference(rank_one(F[0], E[0]), rank_one(F[0], E[0], -1.0))
    assert cancel.cosine == pytest.approx(-1.0, abs=EXACT)  # same spans, opposite signs
    assert float(cancel.row.min_rank_overlap) == pytest.approx(1.0, abs=EXACT)
    novel = interference(rank_one(F[0], E[0]), rank_one(F[1], E[1]))
    assert novel.cross_term == 0.0 and float(novel.column.min_rank_overlap) == 0.0


def test_the_cosine_of_parallel_float32_updates_is_one_where_their_norms_overflow():
    gen = torch.Generator().manual_seed(0)
    B = (0.5 + torch.rand(64, 4, generator=gen)) * 1e17  # ΔW ~ 1e34 fits float32, ‖ΔW‖² not
    A = (0.5 + torch.rand(4, 48, generator=gen)) * 1e17
    assert torch.isinf(frobenius_inner(as_update((B, A), "t", "x"), as_update((B, A), "t", "x")))
    parallel = interference((B, A, 1.0), (2 * B, A, 0.5))  # the same ΔW, twice written
    assert parallel.cosine == pytest.approx(1.0, abs=1e-6)  # float32 factors, float64 products
    opposite = interference((B, A, 1.0), (B, A, -3.0))
    assert opposite.cosine == pytest.approx(-1.0, abs=1e-6)
    assert math.isnan(interference((B, A, 1.0), (B, A, 0.0)).cosine)  # a zero update


def test_gated_composition_has_no_static_merge():
    g = [lambda x: x[0]]  # g(x) = x_1
    delta = [F[:, :1] @ E[:1, :]]  # ΔW = f_1 e_1ᵀ
    inputs = torch.stack([E[0], 2 * E[0]])  # e_1 → f_1, 2e_1 → 4f_1
    check = static_merge_exists(g, delta, inputs)
    assert not check.exists and check.residual > 0.5
    constant = static_merge_exists([lambda x: 3.0], delta, inputs)  # a constant gate merges
    assert constant.exists
    torch.testing.assert_close(constant.merged, 3.0 * delta[0], rtol=0, atol=EXACT)


def test_staged_expansion_reports_rank_per_stage_and_no_growth_when_relearning():
    relearn = staged_expansion_report([rank_one(F[0], E[0]), rank_one(F[0], E[0], 0.5)])
    assert [(r.rank_stage, r.rank_total) for r in relearn] == [(1, 1), (1, 1)]
    assert (relearn[1].new_row, relearn[1].new_column) == (0, 0)
    seen = []
    grow = staged_expansion_report(
        [rank_one(F[0], E[0]), rank_one(F[1], E[1]), rank_one(F[0], E[0], -1.0)],
        evaluate=lambda B, A: seen.append(B.shape[1]) or {"norm": float((B @ A).norm())},
    )
    assert [r.rank_total for r in grow] == [1, 2, 1]  # the third stage cancels the first
    assert seen == [1, 2, 3] and grow[2].metrics["norm"] == pytest.approx(1.0, abs=EXACT)
    assert int(grow[1].bases.rank) == 2


SMALL = TransformerConfig(n_layers=1, d_model=8, n_heads=2, d_head=4, d_mlp=12, d_vocab=7, n_ctx=4)


def adapter(seed, r, *, rslora, targets=("q_proj", "fc_in")):
    model = Transformer(SMALL, seed=0, dtype=F64)
    inject_lora(
        model, list(targets), r, 2.0 * r, init="peft-gaussian", use_rslora=rslora, seed=seed
    )
    made = Adapter.from_model(model, base_model_name_or_path="base")
    modules = {p: AdapterModule(m.A, randn(*m.B.shape, seed=seed + i), m.record)
               for i, (p, m) in enumerate(made.modules.items())}  # fmt: skip  # B ≠ 0
    return Adapter(modules, made.config)


def test_composed_rslora_adapters_keep_their_scales_and_load_in_peft(tmp_path):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    peft = pytest.importorskip("peft")
    a1, a2 = adapter(1, 2, rslora=True), adapter(2, 4, rslora=True, targets=("q_proj", "v_proj"))
    composed = compose_adapters([a1, a2], [0.5, 2.0])
    folder = composed.save(tmp_path / "composed")
    loaded = peft.PeftModel.from_pretrained(Transformer(SMALL, seed=0, dtype=F64), folder)
    layers = {n: m for n, m in loaded.base_model.model.named_modules()
              if isinstance(m, peft.tuners.lora.LoraLayer)}  # fmt: skip
    assert set(layers) == set(a1.modules) | set(a2.modules)
    for module, layer in layers.items():
        want = sum(w * a.delta_weight(module) for w, a in ((0.5, a1), (2.0, a2))
                   if module in a.modules)  # fmt: skip  # each s_j = 2r_j/√r_j
        diff = layer.get_delta_weight("default") - want
        assert diff.abs().max() <= 1e-12, module
    q = next(m for m in composed.ledger if m.module.endswith("q_proj"))
    assert q.ranks == (2, 4) and q.written_rank == 6
    assert q.scales == pytest.approx((4 / 2**0.5, 8 / 4**0.5), abs=0)  # α/√r of each source
    assert q.measured_rank <= q.rank_bound <= 6
    assert len(q.pairs) == 1
    ledger = json.loads((folder / "gaugelab_composition.json").read_text())
    assert ledger["method"] == "cat" and len(ledger["modules"]) == 3
    with pytest.raises(FileExistsError):
        composed.save(folder)


def test_svd_composed_adapter_reports_its_residual():
    a1, a2 = adapter(1, 2, rslora=False), adapter(2, 3, rslora=False)
    composed = compose_adapters([a1, a2], method="svd", rank=2)
    module = "blocks.0.mlp.fc_in"
    exact = a1.delta_weight(module) + a2.delta_weight(module)
    S = torch.linalg.svdvals(exact)
    row = next(m for m in composed.ledger if m.module == module)
    assert row.written_rank == 2
    assert row.relative_residual == pytest.approx(float(S[2:].square().sum() / S.square().sum()),
                                                  abs=1e-12)  # fmt: skip
    approx = composed.adapter.delta_weight(module)
    assert float((exact - approx).square().sum()) == pytest.approx(float(S[2:].square().sum()),
                                                                   abs=1e-10)  # fmt: skip


def test_composition_refuses_bad_input():
    a1, a2 = adapter(1, 2, rslora=False), adapter(2, 2, rslora=False)
    other = Adapter(a2.modules, dataclasses.replace(a2.config, base_model_name_or_path="other"))
    with pytest.raises(ValueError, match="different base models"):
        compose_adapters([a1, other])
    with pytest.raises(ValueError, match="method='svd' needs rank"):
        compose_adapters([a1, a2], method="svd")
    with pytest.raises(ValueError, match="2 coefficients for 1 updates"):
        compose_static([rank_one(F[0], E[0])], [1.0, 2.0])
    with pytest.raises(ValueError, match="coefficients\\[0\\]"):
        compose_static([rank_one(F[0], E[0])], [float("nan")])


def test_x_minus_x_measures_rank_zero_and_never_more_than_its_bound():
    g = torch.Generator().manual_seed(11)
    B, A = torch.randn(40, 4, generator=g, dtype=torch.float64), torch.randn(
        4, 30, generator=g, dtype=torch.float64
    )
    comp = compose_static([(B, A, 2.0), (B, A, 2.0)], [1.0, -1.0])
    assert comp.rank_bound == 4 and comp.measured_rank == 0
    given = compose_static([(B, A, 2.0), (B, A, 2.0)], [1.0, -1.0], rtol=0.0)  # counts round-off
    assert given.measured_rank <= given.rank_bound  # rtol = 0 counts round-off on both sides


def test_a_bfloat16_composition_keeps_its_ranks():
    g = torch.Generator().manual_seed(12)
    parts = [
        ((torch.randn(4096, 8, generator=g) * 0.01).bfloat16(),
         (torch.randn(8, 256, generator=g) / 16).bfloat16(), 2.0)
        for _ in range(2)
    ]  # fmt: skip
    assert 4096 * torch.finfo(torch.bfloat16).eps >= 1  # a bfloat16 tolerance would say rank 0
    comp = compose_static(parts, [0.5, 0.5], check=False)
    assert (comp.rank_b_cat, comp.rank_a_cat, comp.rank_bound, comp.measured_rank) == (16,) * 4


def test_parallel_float32_updates_with_factors_of_1e38_are_parallel_in_every_measure():
    gen = torch.Generator().manual_seed(1)
    B = (0.5 + torch.rand(16, 3, generator=gen)) * 1e38  # the factor's QR overflows float32
    A = 0.5 + torch.rand(3, 12, generator=gen)
    parallel = interference((B, A, 1.0), (B / 4, A, 4.0))  # the same ΔW, written twice
    assert parallel.cosine == pytest.approx(1.0, abs=1e-6)
    assert float(parallel.row.min_rank_overlap) == pytest.approx(1.0, abs=1e-5)
    assert float(parallel.column.min_rank_overlap) == pytest.approx(1.0, abs=1e-5)
    small = interference((B * 1e-38, A, 1.0), (B * 0.25e-38, A, 4.0))  # in range: unchanged
    assert float(small.column.min_rank_overlap) == pytest.approx(1.0, abs=1e-5)


def test_composing_float32_adapters_with_factors_of_1e38_gives_the_ledger_not_an_eigh_error():
    base = adapter(1, 2, rslora=False, targets=("q_proj",))
    (module, part), = base.modules.items()
    B = (part.B / part.B.abs().max() * 1e38).float()  # its Gram matrix overflows float32
    record = dataclasses.replace(part.record, dtype="float32")
    huge = [Adapter({module: AdapterModule(part.A.float(), k * B, record)}, base.config)
            for k in (1.0, 0.5)]  # the same direction twice, at two magnitudes
    composed = compose_adapters(huge)
    (row,) = composed.ledger
    (pair,) = row.pairs
    assert pair.cosine == pytest.approx(1.0, abs=1e-6)  # exactly parallel
    assert row.measured_rank == 2 and row.written_rank == 4
    assert composed.adapter.modules[module].B.dtype == torch.float32  # written as the sources

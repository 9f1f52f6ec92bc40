"""The kernel study on the quick model: matched paths, the first step's exact identities on a
real Transformer (§0x09E: one plain-SGD step from B = 0 is the same for the nonlinear, the
linearized and the fixed-feature path), stored numbers recomputed from the stored factors,
reuse, and the report."""

import copy
import json

import pytest
import safetensors.torch
import torch
from matplotlib.figure import Figure

from gaugelab.experiments.lora.data import base_model, load_corpus, pretrain_weights
from gaugelab.experiments.lora_kernel.run import (
    KernelSpec,
    diagnostics_figure,
    notes,
    plan,
    quick_spec,
    report,
    run_lora_kernel,
)
from gaugelab.experiments.lora_kernel.train import plain_attention
from gaugelab.lowrank.kernels.explanation import (
    StackedOutputs,
    linearization_residual,
    linearized_outputs,
)
from gaugelab.models.lora import inject_lora
from gaugelab.study.report.figures import step_axis
from gaugelab.study.store.db import RunStore

pytestmark = pytest.mark.usefixtures("one_thread")

SPEC = quick_spec(pretrain={"steps": 10, "eval_every": 5, "checkpoint_every": 10}, steps=3,
                  checkpoints=(0, 1, 3), probe_examples=2)  # fmt: skip


@pytest.fixture(scope="module")
def study(tmp_path_factory, one_thread):
    store = tmp_path_factory.mktemp("kernel") / "store.sqlite"
    return store, run_lora_kernel(SPEC, store=store)


def _files(store, identity):
    with RunStore(store) as db:
        attempt = [a for a in db.attempts(identity) if a.termination == "completed"][-1]
        return {a.path.name: a.path for a in db.artifacts(identity) if a.ordinal == attempt.ordinal}


def test_every_path_is_diagnosed_at_the_same_checkpoints(study):
    _, outcome = study
    result = outcome.result
    assert not result.failures and [r.optimizer for r in result.runs] == ["gd", "adam"]
    for run in result.runs:
        assert list(run.data["paths"]) == ["nonlinear", "linearized", "fixed-features"]
        for path, rows in run.data["paths"].items():
            assert [r["step"] for r in rows] == [0, 1, 3], path
            first = rows[0]  # θ_t = θ_0: the diagnostics are exact
            assert (first["r_lin"], first["d_j"], first["d_k"], first["a_k"]) == (0, 0, 0, 1)
        starts = {rows[0]["target"] for rows in run.data["paths"].values()}
        spread = max(starts) - min(starts)  # one model at step 0, one probe, one batch set
        assert spread < 1e-6, spread
        assert run.data["axes"]["order"] == "example_then_output"
        assert run.data["axes"]["forward_mode"] == "plain attention"
        assert "NotImplementedError" in run.data["axes"]["fallback"]
    trainable = result.runs[0].data["trainable"]
    assert trainable["nonlinear"] == trainable["linearized"] > trainable["fixed-features"]


def test_one_sgd_step_from_b_zero_is_the_same_on_every_path(study, margin):
    # ∇_A L = s Bᵀ (∂L/∂Y) Xᵀ = 0 at B = 0 in every layer, and ∇_B L = J_0ᵀ g_F on every path
    _, outcome = study
    gd = outcome.result.runs[0].data["paths"]
    at1 = {p: rows[1] for p, rows in gd.items()}
    assert at1["linearized"]["distance"] == pytest.approx(at1["nonlinear"]["distance"], rel=1e-5)
    assert at1["fixed-features"]["distance"] == pytest.approx(at1["nonlinear"]["distance"],
                                                              rel=1e-5)  # fmt: skip
    # the trained linearized model predicts the nonlinear one as well as its own tangent does
    assert at1["linearized"]["prediction_gap"] == pytest.approx(at1["nonlinear"]["r_lin"],
                                                                abs=1e-4)  # fmt: skip
    assert at1["nonlinear"]["r_lin"] > 0  # the tangent step is not exact on a deep model
    # later the paths separate (A moves only on the nonlinear path)
    last = {p: rows[-1]["distance"] for p, rows in gd.items()}
    margin.above("linearized vs nonlinear, last step", abs(last["linearized"] - last["nonlinear"]),
                 1e-6, log=True)  # fmt: skip


def test_stored_residual_is_recomputed_from_the_stored_factors(study):
    store, outcome = study
    run = outcome.result.runs[1]  # adam
    files = _files(store, run.state.identity)
    saved = safetensors.torch.load_file(str(files["paths.safetensors"]))
    probes = safetensors.torch.load_file(str(files["probes.safetensors"]))
    assert {k.split("/", 1)[1].rsplit(".", 1)[1] for k in saved if k.startswith("fixed")} == {
        "lora_B"
    }  # the fixed-feature path trains the zero factor only
    with RunStore(store) as db:
        weights = pretrain_weights(db, SPEC.pretrain)
    corpus = load_corpus(SPEC.pretrain.corpus)
    model = base_model(SPEC.pretrain, weights, corpus.d_vocab)
    inject_lora(model, list(SPEC.targets), SPEC.rank, SPEC.alpha_ratio * SPEC.rank, seed=SPEC.seed)
    plain_attention(model)
    out = StackedOutputs(copy.deepcopy(model), probes["inputs"])
    theta0 = out.theta()
    theta_t = {n: saved[f"nonlinear/{n}"] for n in out.names}
    F0, F_lin = linearized_outputs(out, theta0, theta_t)
    with torch.no_grad():
        Ft = out(theta_t)
    stored = run.data["paths"]["nonlinear"][-1]["r_lin"]
    assert linearization_residual(Ft, F0, F_lin) == pytest.approx(stored, rel=1e-4)
    assert probes["z"].shape == (SPEC.probes, out.size) and set(probes["z"].unique().tolist()) <= {
        -1.0, 1.0}  # fmt: skip


def test_a_second_run_reuses_the_store_and_reports_are_never_overwritten(study, tmp_path):
    store, _ = study
    again = run_lora_kernel(SPEC, store=store, report_dir=tmp_path / "r")
    assert len(again.sweep.skipped) == 3  # the pretrain and both optimizers' runs
    html = (tmp_path / "r" / "report.html").read_text()
    assert "does not prove" in html and "kernel_diagnostics" in html
    with pytest.raises(FileExistsError):
        report(again.result, tmp_path / "r")
    json.dumps(again.result.runs[0].data, allow_nan=False)


def test_a_run_holds_one_optimizer_and_bad_specs_name_the_field():
    assert [s.optimizer for s in plan(SPEC).specs()] == ["gd", "adam"]
    # a run ignores the other optimizer's rate: changing gd's rate reuses the adam run
    gd, adam = plan(SPEC.model_copy(update={"gd_lr": 0.05})).specs()
    assert adam.identity() == plan(SPEC).specs()[1].identity()
    assert gd.identity() != plan(SPEC).specs()[0].identity() and gd.gd_lr == 0.05
    with pytest.raises(ValueError, match="checkpoints"):
        quick_spec(checkpoints=(1, 3))
    with pytest.raises(ValueError, match="optimizers"):
        KernelSpec(optimizers=("lion",))
    with pytest.raises(ValueError, match="a run holds one"):
        _ = SPEC.optimizer


@pytest.mark.parametrize("field", ["gd_lr", "adam_lr"])
@pytest.mark.parametrize("value", [float("inf"), float("nan"), 0.0, -0.1])
def test_every_rate_is_checked_finite_and_positive_before_any_run(field, value):
    with pytest.raises(ValueError, match=rf"{field}=.*allowed: a finite number > 0"):
        quick_spec(**{field: value})
    assert quick_spec(**{field: 1e-30}).lr(field.removesuffix("_lr")) == 1e-30


def test_a_rank_above_min_d_in_d_out_is_refused_naming_the_bound():
    assert quick_spec(rank=32).rank == 32  # d_model 32, d_mlp 64: r = 32 fits all
    with pytest.raises(ValueError, match=r"rank=33; allowed: integers in \[1, 32\], min\(d_in, "
                       r"d_out\) of the adapted projections \(q_proj 32, .*fc_out 32; d_model"):
        quick_spec(rank=33)
    with pytest.raises(ValueError, match=r"rank=20; allowed: integers in \[1, 16\], .*"
                       r"\(fc_in 16, fc_out 16; d_model 32, d_mlp 16\)"):
        quick_spec(pretrain={"d_mlp": 16}, rank=20)  # only the MLP's 16 is below 20


def test_notes_say_when_a_level_was_never_exceeded_and_name_the_rank(study):
    result = copy.deepcopy(study[1].result)
    gd = result.runs[0]
    for row, gap in zip(gd.data["paths"]["linearized"], (0.0, 0.05, 0.2), strict=True):
        row["prediction_gap"] = gap
    for row, r_lin in zip(gd.data["paths"]["nonlinear"], (0.0, 0.05, 0.07), strict=True):
        row["r_lin"] = r_lin
    lines = notes(result)
    assert (
        "gd: the linearized model's prediction gap first exceeds 0.1 at step 3 of 3; the "
        "nonlinear path's R_lin never exceeded 0.1 at a checkpoint within 3 steps"
    ) in lines
    assert (
        "gd: neither the linearized model's prediction gap nor the nonlinear path's R_lin "
        "exceeded 0.5 at a checkpoint within 3 steps"
    ) in lines
    assert not any("(never)" in line for line in lines)


def test_the_step_axis_reads_as_integers_at_the_checkpoints(study):
    fig = diagnostics_figure(study[1].result)
    for ax in fig.axes:
        assert list(ax.get_xticks()) == [0, 1, 3]  # SPEC's checkpoints
        assert [t.get_text() for t in ax.get_xticklabels()] == ["0", "1", "3"]
        assert len(ax.xaxis.get_minorticklocs()) == 0
    fig.canvas.draw()  # lays out without error
    ax = Figure().subplots()
    default = KernelSpec.model_fields["checkpoints"].default  # 0, 5, 10, 25, 50, 100, 200
    assert step_axis(ax, default) == [0, 5, 25, 200]  # neighbours ≥ 1/7 of the axis apart
    assert step_axis(ax, (0, 1, 2, 5, 10, 20, 50), log=True) == [1, 2, 5, 10, 20, 50]
    assert ax.get_xscale() == "log"

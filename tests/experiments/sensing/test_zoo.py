"""gaugelab.experiments.sensing.zoo: the spec, the split verdict and a reduced zoo end to end.

The reduced zoo (n = 10, r* = 2, m = 72, 600 steps, seeds 42 and 123, one rate per rule,
float32) was measured before the orderings below were written; its mean recovery errors:
gd (2e-2) 0.0174, scalar-adam (1e-2) 0.0283, muon (1e-1, cosine) 0.0001; adam (1e-2) 0.134,
adafactor (3e-3) 0.209, rmsprop (3e-3, cosine) 0.254. Balancedness ‖UᵀU − VᵀV‖: gd ≈ 0.04,
adam ≈ 2.6 (n = 8 smoke run) — gradient descent nearly conserves it, Adam does not.
"""

import pytest
from matplotlib.colors import to_hex
from pydantic import ValidationError

from gaugelab.experiments.sensing import figures as _sensing_figures
from gaugelab.experiments.sensing.zoo import (
    CONVEX,
    LearningRateGrids,
    ZooSpec,
    plan,
    report,
    rule_class,
    run_zoo,
    split_verdict,
    tables,
)
from gaugelab.study import RunStore

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


EQ, CO = "equivariant", "coordinatewise"


def test_defaults_are_the_reference_protocol():
    spec = ZooSpec()
    assert (spec.n, spec.rank, spec.k, spec.m, spec.init_scale) == (40, 3, None, None, 1e-3)
    assert spec.seeds == (42, 123, 456) and spec.steps == 20_000
    assert (spec.interpolation_loss, spec.check_every, spec.divergence_loss) == (1e-7, 200, 1e8)
    assert spec.rules == (
        "gd",
        "adam",
        "scalar-adam",
        "rmsprop",
        "signum",
        "lion",
        "adafactor",
        "muon",
        "shampoo",
    )
    assert spec.decayed == ("muon", "signum", "lion", "rmsprop")
    assert spec.schedule == "reference" and spec.dtype == "float32" and spec.tail == 0.0


def test_the_spec_rejects_unknown_rules_and_empty_work():
    with pytest.raises(ValidationError, match="unknown rule"):
        ZooSpec(rules=("adamm",))
    with pytest.raises(ValidationError, match="nothing to run"):
        ZooSpec(rules=(), convex=False)
    with pytest.raises(ValidationError, match="rank"):
        ZooSpec(n=4, rank=5)
    with pytest.raises(ValueError, match="rules with a grid"):
        LearningRateGrids().grid("adam-p")


def test_one_run_per_rule_plus_the_convex_row():
    spec = ZooSpec(rules=("gd", "muon"))
    sweep = plan(spec)
    runs = sweep.specs()
    assert [r.labels() for r in runs] == [["gd"], ["muon"], [CONVEX]]
    assert len({r.identity() for r in runs}) == 3
    assert sweep.study == f"zoo-{spec.identity()[:12]}"


def test_rule_classes_follow_the_zoo_claims():
    assert [rule_class(r) for r in ("gd", "scalar-adam", "muon", "shampoo")] == [EQ] * 4
    assert [rule_class(r) for r in ("adam", "rmsprop", "signum", "lion", "adafactor")] == [CO] * 5


def test_split_verdict_on_a_clean_split():
    rec = {"gd": 0.13, "muon": 0.0, "adam": 0.57, "signum": 0.45}
    cls = {"gd": EQ, "muon": EQ, "adam": CO, "signum": CO}
    v = split_verdict(rec, cls)
    assert (v.worst_equivariant, v.best_coordinatewise) == ("gd", "signum")
    assert v.gap == pytest.approx(0.32) and v.clean and (v.classified, v.total) == (4, 4)


def test_split_verdict_without_a_clean_split_counts_the_best_threshold():
    rec = {"gd": 0.13, "shampoo": 0.5, "adam": 0.57, "signum": 0.0}
    cls = {"gd": EQ, "shampoo": EQ, "adam": CO, "signum": CO}
    v = split_verdict(rec, cls)
    assert not v.clean and v.gap == pytest.approx(-0.5)
    assert (v.classified, v.total) == (3, 4)  # a threshold in (0.13, 0.5) misplaces one
    assert split_verdict({"gd": 0.1}, {"gd": EQ}) is None  # one class only


@pytest.fixture(scope="module")
def reduced(tmp_path_factory):
    store = tmp_path_factory.mktemp("zoo") / "store.sqlite"
    grids = LearningRateGrids(
        gd=(2e-2,),
        scalar_adam=(1e-2,),
        muon=(1e-1,),
        adam=(1e-2,),
        rmsprop=(3e-3,),
        adafactor=(3e-3,),
    )
    spec = ZooSpec(
        n=10,
        rank=2,
        steps=600,
        check_every=100,
        seeds=(42, 123),
        lr_grids=grids,
        rules=("gd", "scalar-adam", "muon", "adam", "rmsprop", "adafactor"),
        convex=True,  # make test installs gaugelab[convex]
    )
    seen = []
    outcome = run_zoo(
        spec,
        store=store,
        progress=lambda done, total: seen.append((done, total)),
        write_report=False,
    )
    return spec, store, outcome.result, seen


def test_reduced_zoo_orders_equivariant_rules_before_coordinatewise_ones(reduced, margin):
    _, _, result, _ = reduced
    rec = {row.rule: row.mean_recovery for row in result.rows}
    margin.below("muon recovery", rec["muon"], 1e-3, log=True)  # measured 1e-4
    for rule in ("gd", "scalar-adam", "muon"):
        margin.below(f"{rule} recovery", rec[rule], 0.05)  # measured ≤ 0.028
    for rule in ("adam", "rmsprop", "adafactor"):
        margin.above(f"{rule} recovery", rec[rule], 0.1)  # measured ≥ 0.134
    assert rec["scalar-adam"] < rec["adam"]  # the shared scalar removes the basis dependence
    assert result.split.clean and result.split.classified == result.split.total == 6
    bal = {row.rule: sum(row.balancedness) for row in result.rows}
    assert bal["gd"] < bal["adam"]
    assert not result.failures


def test_the_convex_row_is_the_nuclear_norm_solution(reduced, margin):
    _, _, result, _ = reduced
    assert result.convex is not None and result.convex.rule == CONVEX
    assert len(result.convex.recovery) == 2  # one solve per seed
    for seed, (recovery, loss) in enumerate(zip(result.convex.recovery, result.convex.loss,
                                                strict=True)):  # fmt: skip
        # exact recovery: the solver's tolerance, measured 5.6e-8 to 7.8e-8 over the CPU variations
        margin.below(f"convex recovery, seed {seed}", recovery, 1e-6)
        margin.below(f"convex loss, seed {seed}", loss, 1e-10, log=True)  # the measurements hold


def test_the_study_is_in_the_store_and_a_rerun_executes_nothing(reduced):
    spec, store, result, seen = reduced
    assert seen[0] == (0, 7) and seen[-1] == (7, 7)  # six rules and the convex row, by run
    with RunStore(store, create=False) as db:
        for run in result.runs:
            assert db.completed(run.identity)
            kinds = [a.kind for a in db.artifacts(run.identity)]
            assert kinds == ["result"]
        names = {m.name for m in db.metrics(result.runs[0].identity)}
        assert "gd/final_recovery/lr=0.02/seed=42" in names
    again = run_zoo(spec, store=store, write_report=False)
    assert len(again.sweep.skipped) == 7 and not again.sweep.completed
    assert [r.recovery for r in again.result.rows] == [r.recovery for r in result.rows]


def test_tables_and_report(reduced, tmp_path):
    _, _, result, _ = reduced
    tables_ = tables(result)
    assert [row[0] for row in tables_[0].rows][:6] == [r.rule for r in result.rows]
    assert tables_[1].rows[0][5] == "yes"  # the split table: clean split
    paired = {row[0]: row for row in tables_[-1].rows}  # each rule − gd, paired by seed
    gd, adam = ({r.rule: r for r in result.rows}[k] for k in ("gd", "adam"))
    n, mean, _, spread = paired["adam − gd"][1:]
    diffs = [a - g for a, g in zip(adam.recovery, gd.recovery, strict=True)]
    assert n == 2 and mean == pytest.approx(sum(diffs) / 2, abs=1e-15) and mean > 0
    assert spread == f"[{min(diffs):.3g}, {max(diffs):.3g}]"
    path = report(result, tmp_path / "report")
    html = path.read_text(encoding="utf-8")
    assert "scalar-adam" in html and "clean split" in html
    for name in ("recovery_vs_effective_rank", "spectra", "loss_curves"):
        assert (tmp_path / "report" / f"{name}.png").is_file()


def test_one_colour_per_rule_and_no_overlapping_scatter_labels(reduced, tmp_path, saved_figures):
    _, _, result, _ = reduced
    figures = saved_figures
    _sensing_figures.zoo_figures(result, tmp_path)
    colours: dict[str, set] = {}
    scatter = figures["recovery_vs_effective_rank"].axes[0]
    for points in scatter.collections:
        if points.get_label() and not points.get_label().startswith("_"):
            colours.setdefault(points.get_label(), set()).add(to_hex(points.get_facecolor()[0]))
    for name in ("spectra", "loss_curves"):
        for line in figures[name].axes[0].lines:
            colours.setdefault(line.get_label(), set()).add(to_hex(line.get_color()))
    rules = [r.rule for r in result.rows] + [CONVEX]
    assert all(len(colours[r]) == 1 for r in rules)  # one colour per rule in every figure
    assert len({next(iter(colours[r])) for r in rules}) == len(rules)  # distinct rules
    # no text on the points: the legend names the rules, outside the axes
    fig = figures["recovery_vs_effective_rank"]
    assert not scatter.texts
    renderer = fig.canvas.get_renderer()
    legend = scatter.get_legend().get_window_extent(renderer)
    assert not legend.overlaps(scatter.get_window_extent(renderer))
    assert [t.get_text() for t in scatter.get_legend().get_texts()] == rules


def test_the_report_opens_with_the_results_and_ends_with_the_spec(reduced, tmp_path):
    _, _, result, _ = reduced
    html = report(result, tmp_path / "report").read_text(encoding="utf-8")
    sections = ("summary", "tables", "figures", "failures", "runs", "spec")
    order = [html.index(f'<section id="{s}">') for s in sections]
    assert order == sorted(order)
    spec = html[html.index('<section id="spec">') :]
    assert spec.index("<details>") < spec.index("&#34;rules&#34;") < spec.index("</details>")
    summary = html[order[0] : order[1]]
    assert "clean split" in summary  # the verdict first

"""gaugelab.experiments.sensing.dial: the Adam-p dial spec, both arms and a reduced dial end to end.

The reduced dial (n = 10, r* = 2, 600 steps, seeds 42 and 123, float32, RMS mean) was measured
first; mean recovery error at lr 1e-2 for p = 1, 0.75, 0.5, 0.25, 0: 0.134, 0.106, 0.066,
0.045, 0.028 (effective rank 3.00 → 2.11), and at lr 3e-2: 0.146, 0.109, 0.072, 0.051, 0.035.
gd at 2e-2: 0.017.
"""

import pytest
from matplotlib.colors import to_hex
from pydantic import ValidationError

from gaugelab.experiments.sensing import figures as _sensing_figures
from gaugelab.experiments.sensing.dial import (
    DIAL_LRS,
    DIAL_PS,
    DialSpec,
    is_monotone,
    plan,
    report,
    run_dial,
    tables,
)

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def test_defaults_are_the_reference_dial():
    spec = DialSpec()
    assert spec.ps == DIAL_PS == (1.0, 0.75, 0.5, 0.25, 0.0)
    assert spec.lrs == DIAL_LRS == (1e-3, 3e-3, 1e-2, 3e-2, 1e-1)
    assert spec.steps == 30_000 and spec.mean == "rms" and spec.gd_reference
    assert not spec.decays("adam-p")  # adam-p is not in the decayed set


def test_the_spec_rejects_bad_settings():
    with pytest.raises(ValidationError, match="ps="):
        DialSpec(ps=(1.5,))
    with pytest.raises(ValidationError, match="mean"):
        DialSpec(mean="harmonic")
    with pytest.raises(ValidationError, match="nothing to run"):
        DialSpec(ps=(), gd_reference=False)


def test_one_run_per_p_plus_gd():
    runs = plan(DialSpec(ps=(1.0, 0.0))).specs()
    assert [r.labels() for r in runs] == [["adam-p@1"], ["adam-p@0"], ["gd"]]


def test_monotone_means_recovery_error_increases_with_p():
    assert is_monotone([1.0, 0.5, 0.0], [0.57, 0.35, 0.2])
    assert not is_monotone([1.0, 0.5, 0.0], [0.57, 0.6, 0.2])
    assert not is_monotone([1.0, 0.0], [0.5, float("nan")])


@pytest.fixture(scope="module")
def reduced(tmp_path_factory):
    store = tmp_path_factory.mktemp("dial") / "store.sqlite"
    spec = DialSpec(
        n=10,
        rank=2,
        steps=600,
        check_every=100,
        seeds=(42, 123),
        ps=(1.0, 0.5, 0.0),
        lrs=(1e-2, 3e-2),
        gd_lrs=(2e-2,),
    )
    return store, run_dial(spec, store=store, write_report=False).result


def test_reduced_dial_recovery_falls_along_the_dial(reduced):
    _, result = reduced
    rec = [pt.mean_recovery for pt in result.points]  # p = 1, 0.5, 0
    assert rec[0] > rec[1] > rec[2]  # measured 0.134 > 0.066 > 0.028 (per-p rate 1e-2)
    assert result.monotone
    er = [pt.mean_effective_rank for pt in result.points]
    assert er[0] > er[2]  # measured 3.00 > 2.11
    assert result.gd.mean_recovery < rec[0]  # measured 0.017
    for j in range(2):  # the fixed-rate arm: monotone at each shared rate too
        assert is_monotone([1.0, 0.5, 0.0], [pt.at_rate(j)[0] for pt in result.points])
    assert all(not pt.choice.interpolated for pt in result.points)  # 600 steps: flagged
    assert 1.5 < result.planted_effective_rank < 2.0  # rank 2, unequal singular values


def test_dial_tables_and_report(reduced, tmp_path):
    _, result = reduced
    per_p, fixed, paired = tables(result)
    assert [row[0] for row in per_p.rows] == ["1", "0.5", "0", "gd"]
    assert fixed.columns == ["p", "0.01", "0.03"]
    rows = {row[0]: row for row in paired.rows}
    assert list(rows)[:2] == ["p=1 − p=0.5", "p=0.5 − p=0"]  # adjacent p, then each p − gd
    one = result.points[0].recovery
    half = result.points[1].recovery
    n, mean, interval, _ = rows["p=1 − p=0.5"][1:]
    assert n == 2 and mean == pytest.approx(
        sum(a - b for a, b in zip(one, half, strict=True)) / 2, abs=1e-15
    )
    assert interval.startswith("[")  # two seeds: a (coarse) bootstrap interval
    path = report(result, tmp_path / "dial")
    assert "Adam-p dial" in path.read_text(encoding="utf-8")
    assert (tmp_path / "dial" / "dial_recovery.png").is_file()


def test_every_dial_line_keeps_its_colour_in_both_figures(reduced, tmp_path, saved_figures):
    _, result = reduced
    figures = saved_figures
    _sensing_figures.dial_figures(result, tmp_path)
    colours: dict[str, set] = {}
    for fig in figures.values():
        for line in fig.axes[0].lines:
            colours.setdefault(line.get_label(), set()).add(to_hex(line.get_color()))
    assert set(figures) == {"dial_recovery", "dial_effective_rank"}
    assert all(len(c) == 1 for c in colours.values())  # gd, planted, each arm: one colour
    assert colours["per-p rate"] == {"#000000"} and "gd" in colours
    assert len({next(iter(c)) for c in colours.values()}) == len(colours)  # all distinct

"""Tests for gaugelab.cli.bench: warmed-up, repeated, interleaved timings shown as a median with
its range, ratios of medians, threads pinned (the speed itself is not a test's business)."""

import os

import pytest
import torch
from typer.testing import CliRunner

from gaugelab.cli import app
from gaugelab.cli.bench import Timing, pinned_threads, ratio_cell, time_calls

runner = CliRunner()


def test_time_calls_warms_up_then_interleaves_the_sides_round_by_round():
    calls = []
    timings = time_calls(
        {"ours": lambda: calls.append("o"), "peer": lambda: calls.append("p")},
        number=2,
        repeat=3,
        warmup=1,
    )
    assert calls == ["o", "p"] + ["o", "o", "p", "p"] * 3  # warm-up, then 3 rounds
    assert [len(t.samples) for t in timings.values()] == [3, 3]
    assert all(x >= 0 for t in timings.values() for x in t.samples)


def test_one_slow_repeat_widens_the_range_instead_of_becoming_the_result():
    # the outlier of a loaded machine: adamw 15.5 ms in one round, 0.5 ms otherwise
    ours = Timing((0.5e-3, 0.52e-3, 15.5e-3, 0.49e-3, 0.51e-3))
    peer = Timing((0.53e-3, 0.55e-3, 0.52e-3, 0.54e-3, 0.53e-3))
    assert ours.median == pytest.approx(0.51e-3)
    assert ours.cell() == "0.510 [0.490–15.500]"
    cell = ratio_cell(peer, ours)
    assert cell.startswith("1.04× [0.03–1.10]")  # the ratio of medians, not 0.0×
    assert cell.endswith(" noisy")
    steady = Timing((0.50e-3, 0.51e-3, 0.50e-3, 0.52e-3, 0.50e-3))
    assert not ratio_cell(peer, steady).endswith("noisy")


def test_ratios_need_the_same_rounds_and_time_calls_checks_its_arguments():
    with pytest.raises(ValueError, match="time both sides in one time_calls"):
        ratio_cell(Timing((1.0, 2.0)), Timing((1.0,)))
    with pytest.raises(ValueError, match="time_calls: repeat=0"):
        time_calls({"f": lambda: None}, number=1, repeat=0)
    with pytest.raises(ValueError, match="functions is empty"):
        time_calls({}, number=1, repeat=1)


def test_pinned_threads_sets_torch_and_child_threads_and_restores_them():
    before, env = torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS")
    with pinned_threads(1):
        assert torch.get_num_threads() == 1
        assert os.environ["OMP_NUM_THREADS"] == os.environ["MKL_NUM_THREADS"] == "1"
    assert torch.get_num_threads() == before
    assert os.environ.get("OMP_NUM_THREADS") == env


BENCH = """
import torch
from gaugelab.cli.bench import ratio_cell, time_calls

TITLE = "toy [a title with brackets]"
COLUMNS = ["threads", "ours ms", "peer ms", "ratio (peer / ours)"]


def run(*, quick=False, progress=None):
    t = time_calls({"ours": lambda: sum(range(100)), "peer": lambda: sum(range(400))},
                   number=5, repeat=3)
    return [[torch.get_num_threads(), t["ours"].cell(), t["peer"].cell(),
             ratio_cell(t["peer"], t["ours"])]]
"""


def test_bench_runs_with_the_pinned_threads_and_prints_medians_with_their_range(tmp_path):
    (tmp_path / "bench_toy.py").write_text(BENCH)
    result = runner.invoke(app, ["bench", "toy", "--dir", str(tmp_path)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    row = next(line for line in result.output.splitlines() if "×" in line)
    cells = [c.strip() for c in row.split("│")[1:-1]]
    assert cells[0] == "1"  # --threads defaults to 1, like the experiments
    assert "[" in cells[1] and "–" in cells[1]  # median [fastest–slowest]
    assert "toy [a title with brackets]" in result.output  # printed as text, not rich markup
    assert "median [fastest–slowest repeat]" in result.output  # the caption says how to read
    bad = runner.invoke(app, ["bench", "toy", "--dir", str(tmp_path), "--threads", "0"])
    assert bad.exit_code == 2 and bad.output.startswith("error: --threads 0; allowed"), bad.output

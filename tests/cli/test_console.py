"""The console of every command (gaugelab.cli._console): tables fitted to 80 columns without
breaking a rule name, periodic progress lines when piped, Ctrl-C and a full disk in one line."""

import errno
import io
import time

import pytest
import typer
from rich.cells import cell_len
from rich.console import Console

import gaugelab.cli._console as console_module
from gaugelab.cli._console import LineProgress, module_progress, rich_table, run_with_bars
from gaugelab.study.report.builder import Table

RULES = ("gd", "scalar-adam", "nuclear-norm", "adam-p@0.75", "muon-hybrid")
COLUMNS = ("rule", "O(k) claim", "lr", "schedule", "mean recovery", "recovery per seed",
           "train loss", "effective rank", "balancedness", "steps per seed", "flag")  # fmt: skip


def render(renderable, width=80):
    out = io.StringIO()
    Console(file=out, width=width, color_system=None).print(renderable)
    return out.getvalue().splitlines()


def zoo_like_table():
    rows = [[rule, "equivariant", 0.03, "constant", 0.878, "0.878, 0.912, 0.95", 14.1, 2.19,
             2.42e-05, 20000, "⚑"] for rule in RULES]  # fmt: skip
    return Table("matrix-sensing zoo: n = 40, r* = 3, seeds [42, 123, 456]", COLUMNS, rows,
                 caption="the learning-rate grids are ours")  # fmt: skip


def cells(lines):
    return {cell.strip() for line in lines for cell in line.split("│")}


@pytest.mark.parametrize("width", [80, 60, 100])
def test_a_wide_table_fits_the_width_and_keeps_rule_names_and_numbers_whole(width):
    lines = render(rich_table(zoo_like_table(), label_columns=1), width)
    assert max(cell_len(line) for line in lines) <= width, "\n".join(lines)
    found = cells(lines)
    assert set(RULES) <= found  # every rule name whole, in one cell
    assert {"2.42e-05", "20000", "equivariant"} <= found
    assert "(continued)" in "\n".join(lines)  # eleven columns do not fit side by side
    parts = 1 + sum("(continued)" in line for line in lines)
    for rule in RULES:  # each part repeats every row, the rule first
        rows = [line for line in lines if line.startswith("│")]
        assert sum(line.split("│")[1].strip() == rule for line in rows) == parts


def test_a_table_that_fits_is_one_table_at_its_natural_width():
    table = Table("t", ("rule", "step 1"), [["scalar-adam", 1.52e-07], ["adam", 3.62e-03]])
    lines = render(rich_table(table, label_columns=1), 80)
    assert "(continued)" not in "\n".join(lines)
    assert "│ scalar-adam │ 1.52e-07 │" in lines  # numbers right-aligned, labels left


def test_titles_headers_and_cells_are_plain_text_never_markup():
    table = Table("[red]title[/red]", ("[b]col[/b] " * 3,), [["[i]cell[/i]"]], caption="[u]c[/u]")
    text = "\n".join(render(rich_table(table), 80))
    for literal in ("[red]title[/red]", "[b]col[/b]", "[i]cell[/i]", "[u]c[/u]"):
        assert literal in text


def test_the_progress_line_shows_runs_running_steps_and_elapsed_time():
    progress = LineProgress("twin runs")
    assert progress.line() == "twin runs: 00:00"
    progress.runs(2, 4)
    progress.steps("adam", 300, 1500)
    progress.steps("muon", 1500, 1500)  # finished: no longer shown
    assert progress.line() == "twin runs: 2/4 runs, adam 300/1500 steps, 00:00"


def test_after_the_runs_the_progress_line_says_what_the_study_is_doing():
    progress = LineProgress("cells")
    progress.runs(4, 4)
    progress.phase("writing the report")
    assert progress.line() == "cells: 4/4 runs, writing the report, 00:00"
    progress = LineProgress("cells")
    progress.phase("collecting the results")  # before any run count: the phase alone
    assert progress.line() == "cells: collecting the results, 00:00"
    console = Console(file=io.StringIO(), width=120, force_terminal=True)
    with console_module.run_bar(console, "cells") as bars:
        bars.runs(2, 2)
        bars.phase("deciding")
        time.sleep(0.3)  # the bar redraws itself several times a second
    out = console.file.getvalue()
    assert "2/2 runs, deciding" in out  # on screen while it decides
    assert not out.rsplit("2/2 runs", 1)[1].startswith(", deciding")  # the last frame: done


def test_the_last_piped_line_says_where_the_runs_ended_not_the_last_phase(monkeypatch, capsys):
    monkeypatch.setattr(console_module, "PROGRESS_INTERVAL", 0.05)

    def study(*, progress, step_progress, phase):
        progress(1, 1)
        phase("writing the report")
        time.sleep(0.12)

    run_with_bars(piped(), "header", "runs", study)
    lines = capsys.readouterr().err.splitlines()
    assert any("1/1 runs, writing the report" in line for line in lines), lines
    assert lines[-1].startswith("runs: 1/1 runs, 00:0"), lines


def test_a_sweep_with_nothing_to_run_says_so_instead_of_0_of_0():
    progress = LineProgress("cells")
    progress.runs(0, 0)
    assert progress.line() == "cells: nothing to run (reused from the store), 00:00"
    console = Console(file=io.StringIO(), width=120, force_terminal=True)
    with console_module.run_bar(console, "cells") as bars:
        bars.runs(0, 0)
        bars.steps("adam", 3, 10)
    out = console.file.getvalue()
    assert "nothing to run (reused from the store)" in out and "3/10 steps" in out
    assert "0/0" not in out and "None" not in out


def piped():
    return Console(file=io.StringIO(), width=200)  # not a terminal


def test_piped_output_prints_periodic_progress_lines_on_stderr(monkeypatch, capsys):
    monkeypatch.setattr(console_module, "PROGRESS_INTERVAL", 0.05)

    def study(*, progress, step_progress, phase):
        progress(0, 2)
        for step in range(1, 5):
            step_progress("adam", step, 4)
            time.sleep(0.06)
        progress(1, 2)
        time.sleep(0.12)
        return "outcome"

    console = piped()
    assert run_with_bars(console, "header", "twin runs", study) == "outcome"
    assert console.file.getvalue() == "header\n"  # stdout: the header, no bar
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) >= 3, lines
    assert all(line.startswith("twin runs: ") for line in lines)
    assert any(", adam " in line and "/4 steps" in line for line in lines), lines
    assert lines[-1].startswith("twin runs: 1/2 runs, 00:0")  # the last line, at the end


def test_piped_module_progress_says_module_i_of_n_on_stderr(monkeypatch, capsys):
    monkeypatch.setattr(console_module, "PROGRESS_INTERVAL", 0.05)
    console = piped()
    with module_progress(console, "composing 2 adapters") as progress:
        for i in range(1, 4):
            progress("composing", i, 224)
            time.sleep(0.07)
    assert console.file.getvalue() == ""  # stdout keeps only the results
    lines = capsys.readouterr().err.splitlines()
    assert lines, "no progress line"
    assert any(line.startswith("composing 2 adapters: composing module 3/224, 00:0")
               for line in lines), lines  # fmt: skip


def test_a_short_piped_run_prints_no_progress_line(capsys):
    run_with_bars(piped(), "header", "runs", lambda *, progress, step_progress, phase: None)
    assert capsys.readouterr().err == ""


class Interrupted(KeyboardInterrupt):
    """What gaugelab.study.sweep.SweepInterrupted carries: done and total."""

    def __init__(self, done, total):
        super().__init__()
        self.done, self.total = done, total


@pytest.mark.parametrize(
    ("error", "message"),
    [
        (Interrupted(2, 5), "interrupted: 2 of 5 runs complete; rerun the same command to "
                            "resume from the last checkpoints\n"),
        (KeyboardInterrupt(), "interrupted; rerun the same command to resume from the last "
                              "checkpoints\n"),
    ],
    ids=["sweep-interrupted", "plain"],
)  # fmt: skip
def test_ctrl_c_during_a_study_says_what_is_kept_and_exits_130(capsys, error, message):
    def study(*, progress, step_progress, phase):
        raise error

    with pytest.raises(typer.Exit) as exit_:
        run_with_bars(piped(), "header", "runs", study)
    assert exit_.value.exit_code == 130
    assert capsys.readouterr().err == message


def test_the_executors_sweep_interrupted_is_reported_with_its_counts(capsys):
    from gaugelab.study.sweep import SweepInterrupted, SweepResult

    def study(*, progress, step_progress, phase):
        raise SweepInterrupted(3, 4, SweepResult())

    with pytest.raises(typer.Exit) as exit_:
        run_with_bars(piped(), "header", "runs", study)
    assert exit_.value.exit_code == 130
    assert capsys.readouterr().err.startswith("interrupted: 3 of 4 runs complete; rerun")


def test_a_full_disk_after_the_runs_says_they_are_kept_and_how_to_write_the_report(
    tmp_path, capsys
):
    store = tmp_path / "s.sqlite"
    figure = tmp_path / "reports" / "fig.png"

    def study(*, store, progress, step_progress, phase):
        progress(0, 3)
        progress(3, 3)
        raise OSError(errno.ENOSPC, "No space left on device", str(figure))

    with pytest.raises(typer.Exit) as exit_:
        run_with_bars(piped(), "header", "runs", study, store=store, study_name="zoo-abc")
    assert exit_.value.exit_code == 2
    err = capsys.readouterr().err
    assert err == (
        f"error: {figure}: no space left on the device while writing the report; the runs are "
        f"kept in the store {store} (`gaugelab runs list --study zoo-abc --store {store}` shows "
        "how each ended: a run can have failed for the same reason); once there is space, "
        "rerun the same command: it reruns what failed and writes the report\n"
    )


def test_a_full_disk_during_the_runs_says_to_rerun(tmp_path, capsys):
    store = tmp_path / "s.sqlite"

    def study(*, store, progress, step_progress, phase):
        progress(1, 3)
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "ckpt"))

    with pytest.raises(typer.Exit):
        run_with_bars(piped(), "header", "runs", study, store=store, study_name="zoo-abc")
    err = capsys.readouterr().err
    assert "the runs completed so far are kept in the store" in err
    assert err.rstrip().endswith("rerun the same command to resume from the last checkpoints")


def test_a_long_caption_under_a_narrow_table_is_wrapped_at_the_console_width():
    caption = "a caption of many words that says what the table does and does not show " * 2
    table = Table("t", ("a", "b"), [[1, 2]], caption=caption.strip())
    lines = render(rich_table(table), 80)
    below = lines[lines.index(next(line for line in lines if line.startswith("└"))) + 1 :]
    assert 1 < len(below) <= 3, lines  # two lines at 80 columns, not one word a line
    assert " ".join(line.strip() for line in below) == caption.strip()
    wide = Table("t", ("a", "b"), [[1, 2]], caption="short")
    assert "short" in render(rich_table(wide), 80)[-1]  # a short one stays the table's own

"""Tests for gaugelab.study.report.figures: curves and scatter plots, the palette, PNG + SVG on disk
(byte-reproducible, never overwritten), and no pyplot."""

import hashlib
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from gaugelab.study.report.figures import (
    PNG_SIGNATURE,
    palette,
    plot_curves,
    plot_scatter,
    save_figure,
)


def _curves():
    steps = np.arange(50)
    return plot_curves(
        {
            "gauge": (steps, 1e-3 * 1.1**steps),
            "identity": (steps, np.zeros(50)),
            "noise": (steps, 1e-7 * 1.2**steps),
        },
        title="logit distance",
        xlabel="step",
        ylabel="relative Frobenius distance",
        logy=True,
        hlines={"noise floor": 1e-6},
    )


def test_save_figure_writes_png_and_svg_with_their_sha256(tmp_path):
    artifact = save_figure(_curves(), tmp_path, "curves")
    assert artifact.png == tmp_path / "curves.png" and artifact.svg == tmp_path / "curves.svg"
    png, svg = artifact.png.read_bytes(), artifact.svg.read_bytes()
    assert png.startswith(PNG_SIGNATURE)
    assert b"<svg" in svg[:1000]
    assert artifact.png_sha256 == hashlib.sha256(png).hexdigest()
    assert artifact.svg_sha256 == hashlib.sha256(svg).hexdigest()


def test_save_figure_is_byte_reproducible(tmp_path):
    first = save_figure(_curves(), tmp_path / "a", "curves")
    second = save_figure(_curves(), tmp_path / "b", "curves")
    assert (first.png_sha256, first.svg_sha256) == (second.png_sha256, second.svg_sha256)


@pytest.mark.parametrize("existing", ["fig.png", "fig.svg"])
def test_save_figure_refuses_to_overwrite(tmp_path, existing):
    (tmp_path / existing).write_bytes(b"keep me")
    with pytest.raises(FileExistsError, match=re.escape(existing)):
        save_figure(_curves(), tmp_path, "fig")
    assert (tmp_path / existing).read_bytes() == b"keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == [existing]  # the other was not written


@pytest.mark.parametrize("name", ["", "../escape", "a/b", ".hidden", "-x", "a b"])
def test_save_figure_rejects_names_that_are_not_file_stems(tmp_path, name):
    with pytest.raises(ValueError, match="save_figure: name"):
        save_figure(_curves(), tmp_path, name)


def test_plot_curves_masks_non_positive_values_on_a_log_axis():
    fig = _curves()
    ax = fig.axes[0]
    assert ax.get_yscale() == "log"
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["gauge", "identity", "noise", "noise floor"]
    assert np.isnan(ax.lines[1].get_ydata()).all()  # the identity twin's zeros


def test_plot_curves_rejects_mismatched_series():
    with pytest.raises(ValueError, match="series 'a' has steps of shape"):
        plot_curves({"a": ([0, 1, 2], [1.0, 2.0])}, title="t", xlabel="x", ylabel="y")
    with pytest.raises(ValueError, match="series is empty"):
        plot_curves({}, title="t", xlabel="x", ylabel="y")


def test_plot_scatter_groups_by_color(tmp_path):
    points = [
        {"lr": 10.0**-k, "loss": 1.0 / k, "optimizer": o}
        for k in (1, 2, 3)
        for o in ("adam", "muon")
    ]
    fig = plot_scatter(points, x="lr", y="loss", color_by="optimizer", title="sweep", logx=True)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["adam", "muon"]
    assert ax.get_xlabel() == "lr" and ax.get_xscale() == "log"
    save_figure(fig, tmp_path, "scatter")
    with pytest.raises(ValueError, match=r"point 0 lacks \['optimizer'\]"):
        plot_scatter([{"lr": 1, "loss": 2}], x="lr", y="loss", color_by="optimizer")


def test_plotting_needs_no_pyplot_and_no_display(tmp_path):
    code = (
        "import sys, numpy as np\n"
        "from gaugelab.study.report.figures import plot_curves, save_figure\n"
        "fig = plot_curves({'a': (np.arange(3), np.ones(3))}, title='t', xlabel='x', ylabel='y')\n"
        f"save_figure(fig, {str(tmp_path)!r}, 'f')\n"
        "assert 'matplotlib.pyplot' not in sys.modules, 'pyplot was imported'\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "MPLBACKEND")}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=60)


def test_palette_gives_distinct_stable_colours_and_plots_use_them():
    labels = [f"rule{i}" for i in range(14)]
    colours = palette(labels)
    assert list(colours) == labels and len(set(colours.values())) == 14
    assert palette(labels[:3]) == {k: colours[k] for k in labels[:3]}  # order-stable prefix
    fig = plot_curves(
        {"b": ([0, 1], [1, 2]), "a": ([0, 1], [2, 3])},
        title="t",
        xlabel="x",
        ylabel="y",
        hlines={"floor": 1.0},
        colors={"a": "#123456", "floor": "#654321"},
    )
    got = {line.get_label(): line.get_color() for line in fig.axes[0].lines}
    assert got["a"] == "#123456" and got["floor"] == "#654321" and got["b"] == "C0"

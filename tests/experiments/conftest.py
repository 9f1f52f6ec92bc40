"""Fixtures of the experiment tests."""

import pytest

from gaugelab.experiments import sensing_report


@pytest.fixture
def saved_figures(monkeypatch):
    """Figure name → the matplotlib figure, for every figure sensing_report saves while the
    test runs (the files are written as usual)."""
    figures = {}
    save = sensing_report.save_figure

    def keep(fig, directory, name, **kw):
        figures[name] = fig
        return save(fig, directory, name, **kw)

    monkeypatch.setattr(sensing_report, "save_figure", keep)
    return figures

"""Fixtures of the experiment tests."""

import pytest

from gaugelab.experiments.sensing import figures as _sensing_figures


@pytest.fixture
def saved_figures(monkeypatch):
    """Figure name → the matplotlib figure, for every figure the zoo and the dial save while
    the test runs (the files are written as usual)."""
    figures = {}
    save = _sensing_figures.save_figure

    def keep(fig, directory, name, **kw):
        figures[name] = fig
        return save(fig, directory, name, **kw)

    monkeypatch.setattr(_sensing_figures, "save_figure", keep)
    return figures

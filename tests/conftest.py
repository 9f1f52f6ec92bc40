"""Shared test fixtures."""

import os
from pathlib import Path

import pytest

_CANDIDATES = [
    Path(__file__).resolve().parents[2] / "shared" / "data",  # ../shared/data beside the checkout
    Path("/work/shared/data"),
]


@pytest.fixture(scope="session")
def shakespeare() -> Path:
    """Path of tiny-shakespeare: $GAUGELAB_DATA/tinyshakespeare.txt or ../shared/data/."""
    folders = [Path(os.environ["GAUGELAB_DATA"])] if "GAUGELAB_DATA" in os.environ else []
    for folder in folders + _CANDIDATES:
        path = folder / "tinyshakespeare.txt"
        if path.is_file():
            return path
    searched = ", ".join(str(f) for f in folders + _CANDIDATES)
    raise FileNotFoundError(
        f"tinyshakespeare.txt not found in {searched}; set GAUGELAB_DATA to its folder"
    )

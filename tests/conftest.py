"""Shared test fixtures."""

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def shakespeare(tmp_path_factory) -> Path:
    """Path of a plain-text tinyshakespeare.txt: the packaged copy (digest checked), written
    once per session to a temporary folder."""
    from gaugelab.tasks import tiny_shakespeare_bytes

    path = tmp_path_factory.mktemp("data") / "tinyshakespeare.txt"
    path.write_bytes(tiny_shakespeare_bytes())
    return path

"""tests/portability.sh runs only the files it lists (``--list``); collection refuses a test
marked ``portability`` in any other file (tests/conftest.py)."""

from pathlib import Path

import pytest
from tests.conftest import _refuse_unlisted_portability_tests

REPO = Path(__file__).resolve().parents[1]


class _Item:
    def __init__(self, path: Path, portability: bool):
        self.path = path
        self.portability = portability

    def get_closest_marker(self, name: str):
        return pytest.mark.portability.mark if name == "portability" and self.portability else None


def test_a_portability_test_outside_the_scripts_files_is_refused():
    listed = _Item(REPO / "tests/experiments/twins/test_twins.py", True)
    here = REPO / "tests/test_portability.py"
    _refuse_unlisted_portability_tests([listed, _Item(here, False)])  # every marked one listed
    with pytest.raises(pytest.UsageError, match=r"tests/test_portability\.py"):
        _refuse_unlisted_portability_tests([listed, _Item(here, True)])

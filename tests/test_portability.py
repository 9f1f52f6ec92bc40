"""tests/portability.sh runs only the files it lists (``--list``): every test marked
``portability`` of this session must lie in one of them."""

import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_the_portability_script_lists_every_file_with_a_portability_test(request):
    listed = subprocess.run(
        ["bash", "tests/portability.sh", "--list"], cwd=REPO, capture_output=True, text=True,
        check=True,
    ).stdout.split()  # fmt: skip
    if {item.path for item in request.session.items} == {request.node.path}:
        pytest.skip("reads the session's collected tests: run it with the others")
    marked = {
        str(Path(item.path).relative_to(REPO))
        for item in request.session.items
        if item.get_closest_marker("portability")
    }
    assert listed and all((REPO / path).is_file() for path in listed), listed
    assert marked <= set(listed), sorted(marked - set(listed))

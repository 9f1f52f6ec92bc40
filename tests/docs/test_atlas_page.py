"""tests/docs/atlas_page.py: docs/atlas.md holds a pair of markers for the machine and for each
published source, and a regeneration replaces only what lies between a pair."""

from pathlib import Path

import pytest
from tests.docs.atlas_page import splice

from gaugelab.experiments.atlas import KNOWN_SOURCES

PAGE = Path(__file__).resolve().parents[2] / "docs" / "atlas.md"


@pytest.mark.parametrize("name", ["machine", *KNOWN_SOURCES])
def test_the_page_has_one_block_per_source_and_one_for_the_machine(name):
    text = PAGE.read_text(encoding="utf-8")
    begin, end = f"<!-- generated: {name} -->", f"<!-- end generated: {name} -->"
    assert text.count(begin) == text.count(end) == 1
    assert text.index(begin) < text.index(end)


def test_a_block_is_replaced_and_the_prose_around_it_kept():
    page = (
        "intro\n<!-- generated: heavyball -->\nold table\n<!-- end generated: heavyball -->\n"
        "closing prose\n<!-- generated: machine -->\nold\n<!-- end generated: machine -->\n"
    )
    new = splice(page, "heavyball", "| new | table |\n\n")
    assert new == page.replace("old table\n", "| new | table |\n")
    assert splice(new, "heavyball", "| new | table |") == new  # the same again: unchanged


def test_a_page_without_the_markers_is_refused_naming_them():
    with pytest.raises(ValueError) as caught:
        splice("no markers here\n", "torch.optim", "table")
    assert str(caught.value) == (
        "atlas_page: the page has no <!-- generated: torch.optim --> … "
        "<!-- end generated: torch.optim -->; add the markers"
    )

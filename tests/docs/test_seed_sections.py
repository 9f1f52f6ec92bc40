"""docs/seed003-sections.md is the table tests/docs/seed_sections.py generates from the code."""

from tests.docs.seed_sections import REPO, table

PAGE = REPO / "docs" / "seed003-sections.md"


def test_the_seed_section_table_is_current():
    assert PAGE.read_text(encoding="utf-8") == table(), (
        "docs/seed003-sections.md is out of date: python -m tests.docs.seed_sections > "
        "docs/seed003-sections.md"
    )


def test_every_section_the_code_cites_has_a_row_and_a_worked_example_test_is_listed():
    text = PAGE.read_text(encoding="utf-8")
    assert "| §0x07H | " in text and "test_seed_0x07H_" in text
    assert "| §0x04J | " in text and "test_seed_0x04J_" in text

"""gaugelab.tasks.sources: the text-source records — the pinned stdlib list, user files and
folders in sorted order, digests stable across loads and re-checked on every read."""

import hashlib
import platform
import sysconfig
from pathlib import Path

import pytest

from gaugelab.tasks import TINY_SHAKESPEARE_SHA256, tiny_shakespeare_bytes
from gaugelab.tasks.sources import (
    FILE_SEPARATOR,
    STDLIB_FILES,
    TextSource,
    path_source,
    read_source,
    stdlib_source,
    tiny_shakespeare_source,
)

STDLIB = Path(sysconfig.get_paths()["stdlib"])


def sha(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


def test_pinned_stdlib_list_is_sorted_unique_and_present_in_this_interpreter():
    assert list(STDLIB_FILES) == sorted(STDLIB_FILES)
    assert len(set(STDLIB_FILES)) == len(STDLIB_FILES) == 33
    assert all((STDLIB / name).is_file() for name in STDLIB_FILES)


def test_stdlib_digests_are_the_files_and_stable_across_two_loads():
    first, second = stdlib_source(), stdlib_source()
    assert first == second
    assert first.model_dump_json() == second.model_dump_json()
    raws = [(STDLIB / name).read_bytes() for name in STDLIB_FILES]
    assert [f.path for f in first.files] == list(STDLIB_FILES)
    assert [f.sha256 for f in first.files] == [sha(raw) for raw in raws]
    assert [f.n_bytes for f in first.files] == [len(raw) for raw in raws]
    joined = FILE_SEPARATOR.join(raw.decode("utf-8") for raw in raws)
    assert first.sha256 == sha(joined.encode("utf-8"))
    assert first.n_chars == len(joined)
    assert read_source(first) == joined


def test_stdlib_record_names_the_interpreter_and_no_machine_path():
    source = stdlib_source()
    assert source.kind == "stdlib"
    assert source.python == f"{platform.python_implementation()} {platform.python_version()}"
    assert source.root is None  # the identity does not depend on where Python is installed
    assert str(STDLIB) not in source.model_dump_json()


def test_stdlib_missing_file_is_named():
    with pytest.raises(FileNotFoundError, match=r"stdlib_source: 'no_such_module\.py' is not"):
        stdlib_source(("argparse.py", "no_such_module.py"))


@pytest.mark.parametrize(
    ("files", "message"),
    [((), "files is empty"), (("ast.py", "ast.py"), "repeats a path"),
     (("../ast.py",), "allowed: a path inside"), (("/etc/passwd",), "allowed: a path inside")],
)  # fmt: skip
def test_stdlib_bad_file_lists_are_refused(files, message):
    with pytest.raises(ValueError, match=message):
        stdlib_source(files)


def test_tiny_shakespeare_record_carries_the_packaged_digest():
    source = tiny_shakespeare_source()
    assert source.kind == "tiny-shakespeare"
    assert source.sha256 == source.files[0].sha256 == TINY_SHAKESPEARE_SHA256
    assert source.n_chars == source.files[0].n_bytes == 1_115_394
    assert read_source(source) == tiny_shakespeare_bytes().decode("utf-8")


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    # created out of order; '/' (0x2f) sorts before '_' (0x5f): a/z.py < a_b.py
    (tmp_path / "a_b.py").write_text("AB")
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "z.py").write_text("AZ")
    (tmp_path / "notes.txt").write_text("NOTES")
    (tmp_path / "readme.md").write_text("MD")
    (tmp_path / "Z.py").write_text("BIG-Z")
    return tmp_path


def test_user_folder_is_read_in_sorted_relative_path_order(folder):
    source = path_source(folder)
    assert [f.path for f in source.files] == ["Z.py", "a/z.py", "a_b.py", "notes.txt"]
    assert read_source(source) == FILE_SEPARATOR.join(["BIG-Z", "AZ", "AB", "NOTES"])
    assert source.root == str(folder.resolve())
    assert source.n_chars == len("BIG-Z" + "AZ" + "AB" + "NOTES") + 3 * len(FILE_SEPARATOR)


def test_user_folder_glob_argument_selects_the_files(folder):
    source = path_source(folder, patterns=("*.md", "a/*.py"))
    assert [f.path for f in source.files] == ["a/z.py", "readme.md"]
    assert source.patterns == ("*.md", "a/*.py")


def test_user_file_is_one_entry_relative_to_its_folder(folder):
    source = path_source(folder / "notes.txt")
    assert [f.path for f in source.files] == ["notes.txt"]
    assert source.root == str(folder.resolve()) and source.patterns == ()
    assert source.sha256 == sha(b"NOTES") and read_source(source) == "NOTES"


def test_non_utf8_file_is_refused_naming_it(folder):
    (folder / "latin1.txt").write_bytes("caf\u00e9".encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin1\.txt' is not UTF-8 \(byte 3"):
        path_source(folder)


def test_user_path_errors(tmp_path, folder):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        path_source(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"no file under .* matches"):
        path_source(tmp_path / "empty")
    with pytest.raises(ValueError, match="patterns is empty"):
        path_source(folder, patterns=())
    (tmp_path / "blank.txt").write_text("")
    with pytest.raises(ValueError, match="all empty"):
        path_source(tmp_path / "blank.txt")


def test_a_changed_file_is_refused_on_read(folder):
    source = path_source(folder)
    (folder / "a" / "z.py").write_text("AZ changed")
    with pytest.raises(ValueError, match=r"a/z\.py' has sha256 .* the file changed"):
        read_source(source)


def test_a_removed_file_is_refused_on_read(folder):
    source = path_source(folder)
    (folder / "notes.txt").unlink()
    with pytest.raises(FileNotFoundError, match=r"notes\.txt' does not exist"):
        read_source(source)


def test_record_is_frozen_and_round_trips_through_json(folder):
    source = path_source(folder)
    assert TextSource.model_validate_json(source.model_dump_json()) == source
    with pytest.raises(ValueError):
        source.sha256 = "0" * 64
    with pytest.raises(ValueError):
        TextSource.model_validate({**source.model_dump(), "sha256": "not hex"})

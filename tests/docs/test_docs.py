"""Every fenced ```sh and ```python block of README.md and docs/**/*.md runs and succeeds.

The blocks of one page run in order, in one fresh working folder (so a later block sees what an
earlier one wrote); under ``pytest -n`` the pages spread over the workers.

* A ``sh`` (or ``bash``) block is one bash script (``set -eo pipefail``) with this interpreter's
  folder first on ``PATH``, so ``gaugelab`` and ``python`` are the ones under test. A line that
  starts with ``gaugelab`` runs this environment's console script's ``main()`` in a fresh child
  of the worker's fork server (which imported torch once: :mod:`tests.support.forkserver`); a
  line that starts with ``VAR=value`` assignments runs the console script in a process of its
  own (a variable read at import would miss a forked child). Either way ``--store`` points into
  the working folder when the command takes one and, for the commands in :data:`REDUCTIONS`,
  the extra options that shrink it are added.
* A line ``make TARGET ...`` is checked with ``make -n`` in the repository (the target must exist);
  the ``gaugelab`` commands of its recipe run as above, its other recipe lines (installs, ruff,
  pytest) do not run.
* A ``python`` block runs as a script (``python FILE``, in a child of the fork server); its
  line numbers are the page's, and the texts in :data:`PYTHON_REDUCTIONS` are replaced by
  smaller ones.

A block opts out only with the line ``<!-- docs-test: skip (reason) -->`` immediately before
its opening fence; it is then not collected as a test, and ``test_every_block_left_out_says_why``
lists it with its reason (``pytest -s``) and keeps such blocks the exception.
A failing block fails its test with the page, the block's line and the command's output.
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from tests.support.forkserver import CLIENT

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
BIN = Path(sys.executable).parent
TIMEOUT_S = 300  # per block

LANGUAGES = {"sh": "sh", "bash": "sh", "python": "python"}
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<ticks>`{3,})[ \t]*(?P<info>[^`\s]*)[^`]*$")
SKIP = re.compile(r"^\s*<!--\s*docs-test:\s*skip\s*\((?P<reason>[^()]*\S[^()]*)\)\s*-->\s*$")
MARKER = re.compile(r"docs-test")
GAUGELAB_LINE = re.compile(
    r"^(?P<env>(?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)*)gaugelab(?P<rest>(?:\s.*)?)$"
)
MAKE_LINE = re.compile(r"^make(?P<targets>(?:\s+[A-Za-z0-9_.-]+)+)\s*(?:#.*)?$")
HEREDOC = re.compile(r"<<-?\s*(['\"]?)(?P<word>[A-Za-z_][A-Za-z0-9_]*)\1")


@dataclass(frozen=True)
class Option:
    """An option a reduction sets.

    ``value`` None is a flag: its ``removes`` (e.g. ``--convex``) are taken out and it is added.
    Otherwise ``--name value`` replaces what the page gave, or with ``keep_given`` is added only
    when the page gives none (the page's choice of rules or optimizers stands).
    """

    name: str
    value: str | None = None
    keep_given: bool = False
    removes: tuple[str, ...] = ()


REDUCTIONS: dict[str, tuple[Option, ...]] = {
    "twins": (
        Option("--steps", "2"),
        Option("--optimizers", "adam", keep_given=True),
        Option("--batch-size", "2"),  # the text task's batches (and its validation batches)
    ),
    "zoo": (
        Option("--steps", "50"),
        Option("--seeds", "42"),
        Option("--rules", "gd,adam", keep_given=True),
        Option("--no-convex", removes=("--convex",)),
    ),
    "dial": (
        Option("--steps", "50"),
        Option("--seeds", "42"),
        Option("--ps", "1,0", keep_given=True),
    ),
    "bench": (Option("--quick", removes=("--no-quick",)),),
    "learn-forget": (Option("--quick", removes=("--no-quick",)),),
}
"""Command → the options that shrink it. Every other command runs as the page shows it."""

PYTHON_REDUCTIONS: dict[str, str] = {
    "steps=2000": "steps=50",
    "steps=10, checkpoints=(0, 1, 10)": "steps=2, checkpoints=(0, 1, 2)",
}
"""Text of a ``python`` block → what the test runs instead (the zoo and dial at the sh lines'
``--steps 50``; the twin studies, which print the step-1 distances, at the sh lines' ``--steps
2``); the page keeps the protocol's size."""


@dataclass(frozen=True)
class Block:
    """One fenced block: its page, the line of its opening fence (1-based), language, code."""

    page: Path
    line: int
    lang: str
    code: str
    skip: str | None = None

    @property
    def where(self) -> str:
        page = self.page.relative_to(REPO) if self.page.is_relative_to(REPO) else self.page
        return f"{page}:{self.line}"


def collect_blocks(page: Path) -> list[Block]:
    """The ``sh``/``bash``/``python`` blocks of a Markdown page, in order.

    Raises:
        ValueError: an unclosed fence, or a ``docs-test`` marker that is not a well-formed skip
            line immediately before a runnable block.
    """
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks, i, used_markers = [], 0, set()
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, indent, ticks = i, len(m["indent"]), m["ticks"]
        end = start + 1
        while end < len(lines) and not re.match(rf"^\s*{ticks}`*\s*$", lines[end]):
            end += 1
        if end == len(lines):
            raise ValueError(f"{page}:{start + 1}: unclosed ``` fence")
        lang = LANGUAGES.get(m["info"].lower())
        if lang is not None:
            body = [line[indent:] if line[:indent].strip() == "" else line for line in
                    lines[start + 1 : end]]  # fmt: skip
            skip = SKIP.match(lines[start - 1]) if start > 0 else None
            if skip:
                used_markers.add(start - 1)
            code = "\n".join(body) + "\n"
            blocks.append(Block(page, start + 1, lang, code, skip and skip["reason"].strip()))
        i = end + 1
    stray = [n + 1 for n, line in enumerate(lines) if MARKER.search(line) and n not in used_markers]
    if stray:
        raise ValueError(
            f"{page}: docs-test marker(s) on line(s) {stray} are not a skip line "
            f"'<!-- docs-test: skip (reason) -->' immediately before a sh or python block"
        )
    return blocks


# --- turning a page's shell line into the command the test runs --------------------------------


@functools.cache
def _click_root():
    import typer.main

    from gaugelab.cli.app import app

    return typer.main.get_command(app)


def _command(tokens: list[str]):
    """``(name, click command)`` of the ``gaugelab`` arguments ``tokens`` (``runs list`` → the
    ``runs list`` command); ``(None, None)`` for no command or an unknown one."""
    node, names = _click_root(), []
    for token in tokens:
        sub = getattr(node, "commands", {}).get(token)
        if sub is None:
            break
        node, names = sub, [*names, token]
    return (" ".join(names), node) if names else (None, None)


def _options(command) -> set[str]:
    return {o for p in command.params for o in (*p.opts, *p.secondary_opts)}


def _split_command(rest: str) -> tuple[str, str]:
    """``rest`` up to the first unquoted shell operator or comment, and the remainder."""
    quote, i = None, 0
    while i < len(rest):
        c = rest[i]
        if quote:
            if c == "\\" and quote == '"':
                i += 1
            elif c == quote:
                quote = None
        elif c in "'\"":
            quote = c
        elif c == "\\":
            i += 1
        elif c in "|;&<>" or (c == "#" and (i == 0 or rest[i - 1].isspace())):
            return rest[:i].rstrip(), rest[i:]
        elif c == "$" and rest[i + 1 : i + 2] == "(":
            depth, i = 1, i + 2
            while i < len(rest) and depth:
                depth += {"(": 1, ")": -1}.get(rest[i], 0)
                i += 1
            continue
        i += 1
    return rest.rstrip(), ""


def _given(tokens: list[str], name: str) -> bool:
    return any(t == name or t.startswith(name + "=") for t in tokens)


def _remove(text: str, name: str, flag: bool) -> str:
    value = "" if flag else r"(?:=\S+|\s+(?!-)\S+)?"
    return re.sub(rf"\s+{re.escape(name)}{value}(?=\s|$)", "", text)


def gaugelab_executable() -> list[str]:
    """This environment's ``gaugelab`` console script, else ``python -m gaugelab``."""
    script = BIN / "gaugelab"
    return [str(script)] if script.exists() else [sys.executable, "-m", "gaugelab"]


def rewrite_gaugelab(line: str, store: Path, exe: list[str] | None = None) -> str:
    """The command the test runs for a page's ``gaugelab ...`` line (``exe``: what runs
    ``gaugelab``, by default :func:`gaugelab_executable`, which also runs a line that sets
    environment variables).

    Raises:
        ValueError: the line gives an absolute ``--store`` (the test keeps every store inside its
            working folder).
    """
    m = GAUGELAB_LINE.match(line)
    if m is None:
        return line
    args, tail = _split_command(m["rest"])
    try:
        tokens = shlex.split(args)
    except ValueError:  # an unbalanced quote: leave it to bash to report
        tokens = args.split()
    name, command = _command(tokens)
    extra: list[str] = []
    for option in REDUCTIONS.get(name or "", ()):
        if option.value is None:
            for other in (option.name, *option.removes):
                args = _remove(args, other, flag=True)
            extra.append(option.name)
        elif not (option.keep_given and _given(tokens, option.name)):
            args = _remove(args, option.name, flag=False)
            extra += [option.name, option.value]
    if command is not None and "--store" in _options(command):
        given = []
        for i, token in enumerate(tokens):
            if token.startswith("--store="):
                given.append(token.removeprefix("--store="))
            elif token == "--store" and i + 1 < len(tokens):
                given.append(tokens[i + 1])
        if any(Path(g).is_absolute() for g in given):
            raise ValueError(f"{line!r}: an absolute --store; give a relative path or none")
        if not given:
            extra += ["--store", str(store)]
    if m["env"]:  # a variable read at import (ATEN_CPU_CAPABILITY) would miss a forked child
        exe = None
    program = " ".join(shlex.quote(x) for x in exe or gaugelab_executable())
    added = "".join(" " + shlex.quote(x) for x in extra)
    return f"{m['env']}{program}{args}{added}{' ' + tail if tail else ''}"


def expand_make(line: str) -> tuple[list[str], list[str]]:
    """``(gaugelab lines, other recipe lines)`` of a page's ``make TARGET ...`` line.

    Raises:
        ValueError: make cannot plan the targets (e.g. an unknown target).
    """
    targets = MAKE_LINE.match(line)["targets"].split()
    make = shutil.which("make")
    if make is None:
        raise ValueError(f"{line!r}: make is not installed")
    plan = subprocess.run(
        [make, "-n", "--no-print-directory", "-C", str(REPO), *targets],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    if plan.returncode != 0:
        raise ValueError(f"{line!r}: make -n failed: {plan.stderr.strip()}")
    run, not_run = [], []
    for recipe in plan.stdout.splitlines():
        words = recipe.split(maxsplit=1)
        if words and Path(words[0]).name == "gaugelab":
            run.append("gaugelab" + (" " + words[1] if len(words) > 1 else ""))
        elif recipe.strip():
            not_run.append(recipe.strip())
    return run, not_run


def shell_script(code: str, store: Path, exe: list[str] | None = None) -> tuple[str, list[str]]:
    """The bash script for a sh block, and the make recipe lines it does not run (``exe``: see
    :func:`rewrite_gaugelab`)."""
    physical = code.splitlines()
    out, not_run, heredoc, i = ["set -eo pipefail"], [], None, 0
    while i < len(physical):
        line = physical[i]
        if heredoc is not None:  # a here-document's body is data: never rewritten
            out.append(line)
            heredoc = None if line.strip() == heredoc else heredoc
            i += 1
            continue
        while line.endswith("\\") and i + 1 < len(physical):  # join continuation lines
            i += 1
            line = line[:-1] + " " + physical[i].lstrip()
        i += 1
        stripped = line.strip()
        if MAKE_LINE.match(stripped):
            commands, skipped = expand_make(stripped)
            out += [rewrite_gaugelab(c, store, exe) for c in commands]
            not_run += [f"{stripped}: {s}" for s in skipped]
            continue
        out.append(
            rewrite_gaugelab(stripped, store, exe) if GAUGELAB_LINE.match(stripped) else line
        )
        doc = HEREDOC.search(line)
        if doc:
            heredoc = doc["word"]
    return "\n".join(out) + "\n", not_run


# --- running the pages --------------------------------------------------------------------------


@dataclass
class Outcome:
    """What running one block did."""

    ok: bool
    message: str = ""
    seconds: float = 0.0
    not_run: list[str] = field(default_factory=list)


def _environment(server: dict[str, str]) -> dict[str, str]:
    env = {**os.environ, **server}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env.update(COLUMNS="100", MPLBACKEND="Agg", PYTHONUNBUFFERED="1")
    return env


def run_block(block: Block, folder: Path, server: dict[str, str] | None = None) -> Outcome:
    """Run one block in ``folder``; never raises for a failing block.

    With ``server`` (the ``forkserver`` fixture's environment) the ``gaugelab`` lines and a
    ``python`` block run as children of the fork server (:mod:`tests.support.forkserver`): the
    same command, arguments, folder and environment, without importing torch again."""
    client = CLIENT if server else None
    start = time.perf_counter()
    not_run: list[str] = []
    try:
        if block.lang == "python":
            script = folder / f"docs_block_{block.line}.py"
            code = block.code
            for text, smaller in PYTHON_REDUCTIONS.items():
                code = code.replace(text, smaller)
            script.write_text("\n" * block.line + code, encoding="utf-8")
            python = [*client, "script"] if client else [sys.executable]
            argv, shown = [*python, str(script)], code
        else:
            store = folder / "gaugelab-runs" / "store.sqlite"
            shown, not_run = shell_script(block.code, store, client and [*client, "gaugelab"])
            argv = ["bash", "-c", shown]
    except ValueError as exc:
        return Outcome(False, f"{block.where}: {exc}")
    try:
        done = subprocess.run(
            argv, cwd=folder, env=_environment(server or {}), capture_output=True, text=True,
            timeout=TIMEOUT_S,
        )  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        output = (exc.stdout or b"")[-4000:]
        return Outcome(
            False, f"{block.where}: the block ran past {TIMEOUT_S} s\n{shown}\n{output!r}",
            time.perf_counter() - start,
        )  # fmt: skip
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        output = (done.stdout + done.stderr)[-6000:]
        return Outcome(
            False,
            f"{block.where}: the {block.lang} block failed (exit {done.returncode}); it ran\n"
            f"{shown}\n--- output (end) ---\n{output}",
            seconds,
        )
    return Outcome(True, seconds=seconds, not_run=not_run)


def _run_page(
    blocks: list[Block], folder: Path, server: dict[str, str] | None = None
) -> dict[Block, Outcome]:
    """Each block's outcome, in order; the blocks after a failing one are not run."""
    outcomes: dict[Block, Outcome] = {}
    failed = None
    for block in blocks:
        if failed is not None:
            outcomes[block] = Outcome(False, f"{block.where}: not run: {failed} failed before")
        elif block.skip is not None:
            outcomes[block] = Outcome(True)
        else:
            try:
                outcome = run_block(block, folder, server)
            except Exception:  # a bug of this test, not of the page: report it, never hang
                outcome = Outcome(False, f"{block.where}: {traceback.format_exc()}")
            failed = None if outcome.ok else block.where
            outcomes[block] = outcome
    return outcomes


def _all_blocks() -> list[Block]:
    return [b for page in PAGES for b in collect_blocks(page)]


BLOCKS = _all_blocks()


@dataclass
class Pages:
    """Each page's blocks run once, when its first selected block's test asks, up to the page's
    last selected block (``pytest -k``)."""

    last: dict[Path, int]  # page → the line of its last selected block
    folder: object  # tmp_path_factory
    server: dict[str, str]  # the forkserver fixture
    done: dict[Block, Outcome] = field(default_factory=dict)

    def outcome(self, block: Block) -> Outcome:
        if block not in self.done:
            blocks = [b for b in BLOCKS if b.page == block.page and b.line <= self.last[b.page]]
            name = re.sub(r"\W+", "-", str(block.page.relative_to(REPO)))
            self.done.update(_run_page(blocks, self.folder.mktemp(name), self.server))
        return self.done[block]


@pytest.fixture(scope="session")
def pages(request, tmp_path_factory, forkserver) -> Pages:
    last: dict[Path, int] = {}
    for item in request.session.items:
        block = getattr(item, "callspec", None) and item.callspec.params.get("block")
        if isinstance(block, Block):
            last[block.page] = max(last.get(block.page, 0), block.line)
    return Pages(last, tmp_path_factory, forkserver)


def _page_group(block: Block):
    """A page's blocks share a working folder: one pytest-xdist worker runs them all."""
    group = pytest.mark.xdist_group(f"docs:{block.page.relative_to(REPO)}")
    return pytest.param(block, marks=group, id=block.where)


@pytest.mark.slow
@pytest.mark.parametrize("block", [_page_group(b) for b in BLOCKS if b.skip is None])
def test_docs_block_runs(block, pages):
    outcome = pages.outcome(block)
    if os.environ.get("GAUGELAB_DOCS_TIMES"):
        for b in BLOCKS:
            if b.page == block.page and b in pages.done and b.line >= block.line:
                print(f"TIME {pages.done[b].seconds:6.1f} s {b.where}", flush=True)
    for line in outcome.not_run:
        print(f"{block.where}: not run by the docs test: {line}")
    assert outcome.ok, outcome.message


# --- the machinery itself -----------------------------------------------------------------------


def test_every_block_left_out_says_why():
    left_out = [b for b in BLOCKS if b.skip is not None]
    for block in left_out:
        print(f"not run: {block.where}: {block.skip}")  # shown with -s / on failure
        assert block.skip.strip(), block.where
    assert len(left_out) <= 2, [b.where for b in left_out]  # opting out stays the exception


def test_every_page_is_collected_and_has_a_runnable_block():
    assert REPO / "README.md" in PAGES
    runnable = {b.page for b in BLOCKS if b.skip is None}
    assert REPO / "README.md" in runnable


def test_python_reductions_apply_to_some_block():
    for text in PYTHON_REDUCTIONS:
        assert any(text in b.code for b in BLOCKS if b.lang == "python"), text


def test_reductions_name_existing_commands_and_options():
    for name, options in REDUCTIONS.items():
        found, command = _command(name.split())
        assert found == name, f"REDUCTIONS: no command `gaugelab {name}`"
        known = _options(command)
        for option in options:
            missing = {option.name, *option.removes} - known
            assert not missing, f"REDUCTIONS[{name!r}]: `gaugelab {name}` has no {missing}"


def test_collector_reads_languages_lines_and_skip_reasons(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "# t\n\n```sh\ngaugelab optimizers\n```\n\n```text\nnot run\n```\n"
        "<!-- docs-test: skip (needs a GPU) -->\n```python\nprint(1)\n```\n"
        "  ```bash\n  echo indented\n  ```\n",
        encoding="utf-8",
    )
    blocks = collect_blocks(page)
    assert [(b.line, b.lang, b.skip) for b in blocks] == [
        (3, "sh", None), (11, "python", "needs a GPU"), (14, "sh", None),
    ]  # fmt: skip
    assert blocks[2].code == "echo indented\n"


@pytest.mark.parametrize(
    "text",
    [
        "<!-- docs-test: skip -->\n```sh\nls\n```\n",  # no reason
        "<!-- docs-test: skip (far away) -->\n\n```sh\nls\n```\n",  # not immediately before
        "<!-- docs-test: skip (not runnable) -->\n```text\nls\n```\n",  # not a runnable block
    ],
)
def test_a_malformed_or_misplaced_marker_is_an_error(tmp_path, text):
    page = tmp_path / "page.md"
    page.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match="docs-test marker"):
        collect_blocks(page)


def test_rewrite_shrinks_long_commands_and_points_the_store_into_the_folder(tmp_path):
    store = tmp_path / "store.sqlite"
    line = rewrite_gaugelab("gaugelab zoo --steps=20000 --rules gd,muon --convex  # the zoo", store)
    args = shlex.split(line, comments=True)
    assert Path(args[0]).name == "gaugelab" or args[1:3] == ["-m", "gaugelab"]
    rest = args[args.index("zoo") + 1 :]
    assert rest == ["--rules", "gd,muon", "--steps", "50", "--seeds", "42", "--no-convex",
                    "--store", str(store)]  # fmt: skip
    piped = rewrite_gaugelab('X=1 gaugelab runs show "$RUN" | cat', store)
    assert piped.startswith("X=1 ") and piped.endswith(f'"$RUN" --store {store} | cat')
    forked = ["python", "-S", "client.py", "gaugelab"]
    assert rewrite_gaugelab("gaugelab optimizers", store, forked).startswith("python -S client")
    assert " -S " not in rewrite_gaugelab("X=1 gaugelab optimizers", store, forked)
    assert rewrite_gaugelab("gaugelab check adam", store).endswith("check adam")  # no store
    with pytest.raises(ValueError, match="absolute --store"):
        rewrite_gaugelab("gaugelab runs list --store /tmp/elsewhere.sqlite", store)


def test_heredoc_bodies_are_not_rewritten(tmp_path):
    script, _ = shell_script("cat > a.txt <<'EOF'\ngaugelab zoo\nEOF\ngaugelab zoo\n", tmp_path)
    lines = script.splitlines()
    assert lines[2] == "gaugelab zoo"  # the here-document's body
    assert "--steps 50" in lines[4]

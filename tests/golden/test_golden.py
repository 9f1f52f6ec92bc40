"""The printed output of every experiment's quick form, against its recorded golden file.

Each command below runs as a user runs it (``python -m gaugelab …`` in a fresh process, one
store for all of them, in this order: ``lora inspect``, ``compare`` and ``compose`` read the
adapters ``lora finetune`` wrote). Its output is normalised by :func:`normalise` and must equal
``tests/golden/<name>.txt``. The files were recorded before the package was rearranged into
one package per experiment, so a rearrangement that changes any table, verdict or number fails
here.

Normalisation (what is stable across CPUs, the rounding the docs use): progress lines (and
the heartbeat of work slower than 5 s) are dropped; paths, timestamps, content hashes and
columns of wall-clock seconds are masked; table cells are taken without the box drawing and
column padding; prose is re-joined (rich
wraps it to the console width); every non-integer, and every integer of three or more
significant digits, is written with two, and a non-zero number
below 1e-4 in magnitude — round-off-sized, and different on another CPU — reads ``~0``.

To record the files anew after an intended change of output:
``GAUGELAB_GOLDEN_RECORD=1 python -m pytest tests/golden``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

GOLDEN = Path(__file__).parent

COMMANDS: dict[str, list[str]] = {
    "twins": ["twins", "--quick"],
    "zoo": ["zoo", "--quick"],
    "dial": ["dial", "--quick"],
    "lora-finetune": ["lora", "finetune", "--quick", "--ranks", "2", "--seeds", "0,1"],
    "lora-inspect": ["lora", "inspect", "lora r=2", "--ranks", "1,2"],
    "lora-compare": ["lora", "compare", "lora r=2", "lora r=2", "--seed-b", "1", "--quick"],
    "lora-compose": [
        "lora", "compose", "lora r=2", "lora r=2", "--seeds", "0,1", "--weights", "0.5,0.5",
        "--out", "{tmp}/composed", "--quick",
    ],
    "lora-twins": ["lora", "twins", "--quick"],
    "lora-kernel": ["lora", "kernel", "--quick"],
    "intrinsic-dim": ["intrinsic-dim", "--quick"],
    "learn-forget": ["learn-forget", "--quick"],
}
"""Golden name → the command's arguments (``{tmp}``: the test's folder)."""

_TIMED = {"seconds", "time", "wall", "wall s"}
_PROGRESS = re.compile(r"^[\w -]+: \d+/\d+ \w+.*\d\d:\d\d$")
_HEARTBEAT = re.compile(r"^\S.*: \d\d:\d\d$")  # "inspecting lora r=2: 00:05", on slow work
_BOX = re.compile(r"^[\s─━═┏┓┗┛┡┩└┘├┤┬┴┼╇╈┳┻╋┃│]*$")
_PATH = re.compile(r"(?<![\w.])/[^\s'\"`),]+")
_TIME = re.compile(r"\d{8}T\d{6}Z")
_HEX = re.compile(r"\b[0-9a-f]{10,64}\b")
_NUMBER = re.compile(r"(?<![\w.§])[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:e[-+]?\d+)?(?![\w.]*\w)")


def _round(match: re.Match[str]) -> str:
    token = match.group(0)
    value = float(token)
    digits = re.sub(r"e.*|[-+.]", "", token).strip("0")
    if value != 0 and abs(value) < 1e-4:
        return "~0"
    if re.fullmatch(r"[-+]?\d+", token) and len(digits) < 3:
        return token
    return f"{value:.2g}"


def normalise(text: str) -> str:
    """The stable content of a command's output (see the module docstring)."""
    out: list[str] = []
    prose: list[str] = []
    timed: set[int] = set()  # the current table's columns of wall-clock seconds
    header = False

    def flush() -> None:
        if prose:
            out.append(" ".join(prose))
            prose.clear()

    for raw in text.splitlines():
        line = raw.rstrip()
        if _PROGRESS.match(line.strip()) or _HEARTBEAT.match(line.strip()):
            continue
        line = _TIME.sub("<time>", _PATH.sub("<path>", line))
        line = _NUMBER.sub(_round, _HEX.sub("<hash>", line))
        if _BOX.match(line):
            if line.strip():
                flush()
            continue
        if "│" in line or "┃" in line:
            flush()
            cells = [c.strip() for c in re.split(r"[│┃]", line)]
            if "┃" in line:  # a header line (a header may span several)
                named = {i for i, c in enumerate(cells) if c in _TIMED}
                timed = (timed if header else set()) | named
                header = True
            else:
                header = False
                cells = ["<seconds>" if i in timed else c for i, c in enumerate(cells)]
            out.append("| " + " | ".join(cells[1:-1]) + " |")
        else:
            prose.extend(line.split())
    flush()
    return "\n".join(out) + "\n"


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> dict[str, str]:
    """Golden name → the command's normalised output, every command run once, in order."""
    tmp = tmp_path_factory.mktemp("golden")
    env = {**os.environ, "COLUMNS": "160", "NO_COLOR": "1", "TERM": "dumb"}
    results = {}
    for name, args in COMMANDS.items():
        argv = [a.replace("{tmp}", str(tmp)) for a in args]
        proc = subprocess.run(
            [sys.executable, "-m", "gaugelab", *argv, "--store", str(tmp / "store.sqlite")],
            capture_output=True, text=True, env=env, timeout=600, cwd=tmp,
        )
        assert proc.returncode == 0, f"{name}: exit {proc.returncode}\n{proc.stdout}{proc.stderr}"
        results[name] = normalise(proc.stdout + proc.stderr)
    return results


@pytest.mark.parametrize("name", list(COMMANDS))
def test_quick_form_prints_its_golden_output(outputs, name):
    path = GOLDEN / f"{name}.txt"
    if os.environ.get("GAUGELAB_GOLDEN_RECORD"):
        path.write_text(outputs[name])
    assert outputs[name] == path.read_text()


def test_normalise_rounds_masks_and_unwraps():
    text = (
        "twin runs: 1/4 runs, adam 24/100 steps, 00:05\ninspecting lora r=2: 00:05\n"
        "report: /tmp/x/reports/zoo-a39aeaa59d33/20261203T141523Z/report.html\n"
        "┃ rule ┃ step 1   ┃ seconds ┃\n│ adam │ 3.62e-03 │ 0.7 │\n│ q_proj │ 2.87e-07 │ 1 │\n"
        "gauge twin 3.6e-03 at step 1, 12607× its noise\ntwin, 0.247 and 1200 steps\n"
    )
    assert normalise(text) == (
        "report: <path>\n| rule | step 1 | seconds |\n| adam | 0.0036 | <seconds> |\n"
        "| q_proj | ~0 | <seconds> |\n"
        "gauge twin 0.0036 at step 1, 1.3e+04× its noise twin, 0.25 and 1200 steps\n"
    )

"""The printed output of every experiment's quick form, against its recorded golden file.

Each command below runs as a user runs it (a fresh child of the fork server, which imported
torch once: :mod:`tests.support.forkserver`; ``python -m gaugelab`` when recording), in
the store of its chain (:data:`CHAINS`: ``lora inspect``, ``compare`` and ``compose`` read the
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

What still differs between CPUs (a chaotic twin distance, a noise floor, a ratio to one) is
found, not guessed: recording runs every command under each of :data:`VARIANTS` (the kernels
x86 CPUs dispatch to, emulated with ``ATEN_CPU_CAPABILITY``, and one thread against two), and a
number on which the variants disagree is written ``≈`` in the golden file: any number (or
``~0``) matches it there; a line whose words differ between the variants (a verdict at the
noise floor that flips) is written ``⟦one version⟧⟦another⟧`` and either matches. Everything
else — the text, the table structure, every other number — must be equal, non-integers to
within 10% (a value at a rounding boundary, 0.000215, reads 0.00021 on one CPU and 0.00022 on
another). Tables are rendered 400 columns wide, so a wider number never re-wraps a header.

To record the files anew after an intended change of output (about four times the test's time):
``GAUGELAB_GOLDEN_RECORD=1 python -m pytest tests/golden``. On a CPU the files were not
recorded on (another SIMD level: AVX-512 against AVX2), ``GAUGELAB_GOLDEN_RECORD=add`` merges
this machine's variants into the recorded files instead: a number they disagree on becomes
``≈``, a line whose words differ gains a version; ``git diff tests/golden`` shows what changed,
and only a CPU's round-off may.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.forkserver import CLIENT

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
# "inspecting lora r=2: 00:05" on slow work; "composing 2 adapters: composing module 3/14, 00:05"
_HEARTBEAT = re.compile(r"^\S.*[:,] \d\d:\d\d$")
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


VARIANTS: tuple[dict[str, str], ...] = (
    {},
    {"ATEN_CPU_CAPABILITY": "default"},
    {"ATEN_CPU_CAPABILITY": "avx2"},
    # the other thread count than the test's (a pytest-xdist worker runs one: tests/conftest.py)
    {"OMP_NUM_THREADS": "2" if os.environ.get("OMP_NUM_THREADS") == "1" else "1"},
)
"""The environments a recording runs under; the first is also the test's."""

ANY = "≈"
_TOKEN = re.compile(r"~0|≈|[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:e[-+]?\d+)?")


CHAINS: tuple[tuple[str, ...], ...] = (
    ("twins",),
    ("zoo",),
    ("dial",),
    ("intrinsic-dim",),
    ("lora-finetune", "lora-inspect", "lora-compare", "lora-compose", "lora-twins",
     "lora-kernel", "learn-forget"),
)  # fmt: skip
"""The commands that run in one store, in order: the LoRA commands read what ``lora
finetune`` stored (its adapters, its pretrained base); each chain runs on one pytest-xdist
worker, the chains in parallel."""


def run_chain(
    chain: tuple[str, ...], tmp: Path, variant: dict[str, str], server: dict[str, str] | None = None
) -> dict[str, str]:
    """Golden name → the command's normalised output, every command of ``chain`` run once, in
    order, in one fresh store under ``tmp``.

    With ``server`` (the ``forkserver`` fixture's environment: the test, which runs only the
    variant ``{}``, the server's own, passes it; a recording does not) each command runs as a
    child of the fork server; otherwise as ``python -m gaugelab``."""
    tmp.mkdir(parents=True)
    env = {**os.environ, "COLUMNS": "400", "NO_COLOR": "1", "TERM": "dumb", **variant}
    program = [sys.executable, "-m", "gaugelab"]
    if server:
        env.update(server)
        program = [*CLIENT, "gaugelab"]
    results = {}
    for name in chain:
        argv = [a.replace("{tmp}", str(tmp)) for a in COMMANDS[name]]
        proc = subprocess.run(
            [*program, *argv, "--store", str(tmp / "store.sqlite")],
            capture_output=True, text=True, env=env, timeout=600, cwd=tmp,
        )
        assert proc.returncode == 0, f"{name}: exit {proc.returncode}\n{proc.stdout}{proc.stderr}"
        results[name] = normalise(proc.stdout + proc.stderr)
    return results


def _merge_numbers(lines: list[str]) -> str:
    columns = zip(*(_TOKEN.findall(t) for t in lines), strict=True)
    merged = iter([c[0] if len(set(c)) == 1 else ANY for c in columns])
    return _TOKEN.sub(lambda m: next(merged), lines[0])


def merge(texts: list[str]) -> str:
    """One golden text from the variants' outputs, line by line: their numbers where all
    agree, ``≈`` where they differ; a line whose words differ between variants (a verdict that
    flips on another CPU) is written ``⟦version⟧⟦version⟧…``, one version per distinct wording.

    A text may be a golden file itself (its ``≈`` and ``⟦…⟧`` kept): recording with
    ``GAUGELAB_GOLDEN_RECORD=add`` merges this machine's variants into the recorded file.

    Raises:
        AssertionError: the variants print different numbers of lines.
    """
    split = [t.splitlines() for t in texts]
    assert len({len(lines) for lines in split}) == 1, "the variants print different line counts"
    out = []
    for lines in zip(*split, strict=True):
        groups: dict[str, list[str]] = {}
        for version in (v for line in lines for v in _versions(line)):
            groups.setdefault(_TOKEN.sub("#", version), []).append(version)
        versions = [_merge_numbers(group) for group in groups.values()]
        out.append(versions[0] if len(versions) == 1 else "".join(f"⟦{v}⟧" for v in versions))
    return "\n".join(out) + "\n"


def _versions(line: str) -> list[str]:
    """The versions of a golden line: ``⟦a⟧⟦b⟧`` → ``[a, b]``; any other line is its own."""
    return line[1:-1].split("⟧⟦") if line.startswith("⟦") and line.endswith("⟧") else [line]


def _close(output: str, golden: str) -> bool:
    """A number matches its golden one when equal, when the golden is ``≈``, or — for
    non-integers — within 10% (two significant digits round 0.000215 either way)."""
    if golden in (ANY, output):
        return True
    if "~0" in (output, golden) or not any(c in golden + output for c in ".e"):
        return False
    a, b = float(output), float(golden)
    return abs(a - b) <= 0.1 * max(abs(a), abs(b))


def _line_matches(output: str, golden: str) -> bool:
    if _TOKEN.sub("#", output) != _TOKEN.sub("#", golden):
        return False
    pairs = zip(_TOKEN.findall(output), _TOKEN.findall(golden), strict=True)
    return all(_close(o, g) for o, g in pairs)


def matches(output: str, golden: str) -> bool:
    """Whether ``output`` equals ``golden`` line by line, up to the numbers the golden writes
    ``≈``, non-integers within 10%, and one of the versions of a ``⟦…⟧⟦…⟧`` line."""
    outs, golds = output.splitlines(), golden.splitlines()
    if len(outs) != len(golds):
        return False
    for out, gold in zip(outs, golds, strict=True):
        if not any(_line_matches(out, v) for v in _versions(gold)):
            return False
    return True


@pytest.fixture(scope="session")
def outputs(tmp_path_factory, forkserver) -> dict[str, list[str]]:
    """Golden name → the command's normalised output under each variant run (the first
    only, unless recording); each chain run when its first test asks."""
    variants = VARIANTS if os.environ.get("GAUGELAB_GOLDEN_RECORD") else VARIANTS[:1]
    done: dict[str, list[str]] = {}

    def output(name: str) -> list[str]:
        if name not in done:
            chain = next(c for c in CHAINS if name in c)
            tmp = tmp_path_factory.mktemp(f"golden-{chain[0]}")
            server = None if os.environ.get("GAUGELAB_GOLDEN_RECORD") else forkserver
            runs = [
                run_chain(chain, tmp / f"variant{i}", v, server) for i, v in enumerate(variants)
            ]
            if dump := os.environ.get("GAUGELAB_GOLDEN_DUMP"):  # each variant's outputs
                for i, run in enumerate(runs):
                    for key, text in run.items():
                        (Path(dump) / f"{key}.{i}.txt").write_text(text)
            done.update({key: [r[key] for r in runs] for key in chain})
        return done[name]

    return output


def _in_its_chain(name: str):
    chain = next(c for c in CHAINS if name in c)
    return pytest.param(name, marks=pytest.mark.xdist_group(f"golden:{chain[0]}"), id=name)


@pytest.mark.slow
@pytest.mark.parametrize("name", [_in_its_chain(name) for name in COMMANDS])
def test_quick_form_prints_its_golden_output(outputs, name):
    path = GOLDEN / f"{name}.txt"
    if record := os.environ.get("GAUGELAB_GOLDEN_RECORD"):
        recorded = [path.read_text()] if record == "add" else []
        path.write_text(merge(recorded + outputs(name)))
    golden, output = path.read_text(), outputs(name)[0]
    if not matches(output, golden):
        assert output == golden  # pytest shows the difference


def test_every_command_is_in_one_chain():
    assert sorted(n for c in CHAINS for n in c) == sorted(COMMANDS)


def test_merge_marks_what_variants_disagree_on_and_matches_honours_it():
    merged = merge(["| adam | 0.15 | 3 |\nratio 1.3e+04×\nsgd: equivariant (0.1)",
                    "| adam | 0.014 | 3 |\nratio ~0×\nsgd: inconclusive (0.1)"])  # fmt: skip
    assert merged == ("| adam | ≈ | 3 |\nratio ≈×\n"
                      "⟦sgd: equivariant (0.1)⟧⟦sgd: inconclusive (0.1)⟧\n")  # fmt: skip
    assert matches("| adam | 0.2 | 3 |\nratio 7×\nsgd: inconclusive (0.1)", merged)
    assert matches("| adam | 0.2 | 3 |\nratio 7×\nsgd: equivariant (0.105)", merged)  # ≤ 10%
    assert not matches("| adam | 0.2 | 3 |\nratio 7×\nsgd: equivariant (0.12)", merged)
    assert not matches("| adam | 0.2 | 4 |\nratio 7×\nsgd: equivariant (0.1)", merged)
    assert not matches("| sgd | 0.2 | 3 |\nratio 7×\nsgd: equivariant (0.1)", merged)
    assert not matches("| adam | 0.2 | 3 |\nratio 7×\nsgd: basis-sensitive (0.1)", merged)
    with pytest.raises(AssertionError, match="line counts"):
        merge(["| adam | 1 |", "| adam | 1 |\nmore"])


def test_merge_adds_a_machines_variants_to_a_recorded_golden():
    recorded = "| adam | ≈ | 3 |\n⟦sgd: equivariant (0.1)⟧⟦sgd: inconclusive (0.1)⟧\nok 0.5\n"
    merged = merge([recorded, "| adam | 0.2 | 3 |\nsgd: basis-sensitive (0.1)\nok 0.7"])
    assert merged == ("| adam | ≈ | 3 |\n⟦sgd: equivariant (0.1)⟧⟦sgd: inconclusive (0.1)⟧"
                      "⟦sgd: basis-sensitive (0.1)⟧\nok ≈\n")  # fmt: skip
    assert merge([recorded, "| adam | 9 | 3 |\nsgd: inconclusive (0.1)\nok 0.5"]) == recorded


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

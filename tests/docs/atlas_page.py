"""Regenerate docs/atlas.md's tables: the atlas of each published source, with the machine.

    pip install 'gaugelab[atlas]'
    python -m tests.docs.atlas_page --max-workers 2          # all three sources, into the page
    python -m tests.docs.atlas_page --source heavyball       # one section again

Each source's atlas runs at the defaults (``gaugelab atlas --source S --markdown``; the
third-party sources under ``--timeout 60``) into one run store, so a regeneration checks only
what a new release changed. Its Markdown replaces what lies between the page's markers
``<!-- generated: S -->`` and ``<!-- end generated: S -->``, with a line saying how many checks
ran and how long they took; the block ``machine`` gets the date, the versions (gaugelab and its
commit, torch, each source's distribution, Python), the platform, the CPU and its load. The
prose around the markers is the page's own and is left as it is.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import os
import platform
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

from gaugelab.equivariance.verdicts import TIMEOUT
from gaugelab.experiments.atlas import KNOWN_SOURCES, atlas_spec, markdown, run_atlas

PAGE = Path(__file__).resolve().parents[2] / "docs" / "atlas.md"
TIMEOUTS = {"torch.optim": 300.0, "pytorch_optimizer": 60.0, "heavyball": 60.0}
DISTRIBUTIONS = {"pytorch_optimizer": "pytorch-optimizer", "heavyball": "heavyball"}


def splice(page: str, name: str, body: str) -> str:
    """``page`` with the text between ``<!-- generated: name -->`` and
    ``<!-- end generated: name -->`` replaced by ``body``.

    Raises:
        ValueError: the page lacks the pair of markers (the message names them).
    """
    begin, end = f"<!-- generated: {name} -->", f"<!-- end generated: {name} -->"
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
    if not pattern.search(page):
        raise ValueError(f"atlas_page: the page has no {begin} … {end}; add the markers")
    return pattern.sub(lambda _: f"{begin}\n{body.rstrip()}\n{end}", page, count=1)


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def _commit() -> str:
    try:
        done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, cwd=Path(__file__).parent, timeout=10)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return done.stdout.strip() or "unknown"


def machine(workers: int, load: tuple[float, float, float]) -> str:
    """One paragraph: when, on what, with which versions, under which load."""
    libc = " ".join(platform.libc_ver()).strip() or "unknown libc"
    sources = ", ".join(f"{d} {_version(d)}" for d in DISTRIBUTIONS.values())
    return (
        f"Made on {datetime.datetime.now(datetime.UTC):%Y-%m-%d} with gaugelab "
        f"{_version('gaugelab')} (commit {_commit()}), torch {_version('torch')}, {sources}, "
        f"Python {platform.python_version()}, on {platform.system()} {platform.machine()} "
        f"({libc}), {os.cpu_count()} CPU cores ({_cpu()}), `--max-workers {workers}`, one torch "
        f"thread per worker; load average {load[0]:.1f} when it started (the seconds are that "
        "machine's under its load; a section made on another day says its own)."
    )


def _cpu_seconds() -> float:
    """User and system CPU seconds of this process and of its reaped children (the workers)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(
        resource.RUSAGE_CHILDREN
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def run_source(source: str, store: Path, workers: int) -> str:
    """The source's atlas into ``store``, as the page's block: how many checks ran (and how
    many the store already held) in how many seconds, then :func:`markdown`."""
    spec = atlas_spec([source], timeout=TIMEOUTS.get(source, 60.0))
    start, cpu = time.perf_counter(), _cpu_seconds()
    outcome = run_atlas(spec, store=store, max_workers=workers, write_report=False)
    seconds, cpu = time.perf_counter() - start, _cpu_seconds() - cpu
    rows, reused = outcome.result.rows, len(outcome.sweep.skipped)
    timeouts = sum(r.verdict == TIMEOUT for r in rows)
    flags = f" --source {source}" if source != "torch.optim" else ""
    if TIMEOUTS.get(source, 60.0) != 300.0:
        flags += f" --timeout {TIMEOUTS.get(source, 60.0):g}"
    head = (
        f"`gaugelab atlas{flags} --max-workers {workers} --markdown`: {len(rows)} checks"
        + (f" ({reused} reused from the store)" if reused else "")
        + f", {len(rows) - reused} run in {seconds:.0f} s of wall time and {cpu:.0f} s of CPU "
        "time (the workers' included)"
        + (f"; {timeouts} past the time limit" if timeouts else "")
        + "."
    )
    print(f"atlas_page: {source}: {len(rows)} checks, {reused} reused, {seconds:.0f} s",
          file=sys.stderr)  # fmt: skip
    return f"{head}\n\n{markdown(outcome.result)}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default=",".join(KNOWN_SOURCES),
                        help="sources, comma-separated (default: all three)")
    parser.add_argument("--max-workers", type=int, default=2)
    parser.add_argument("--store", type=Path, default=Path("gaugelab-runs/atlas-page.sqlite"))
    parser.add_argument("--page", type=Path, default=PAGE)
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    load = os.getloadavg()
    blocks = {s: run_source(s, args.store, args.max_workers) for s in args.source.split(",") if s}
    blocks["machine"] = machine(args.max_workers, load)
    page = args.page.read_text(encoding="utf-8")  # read after the runs: edits meanwhile are kept
    for name, body in blocks.items():
        page = splice(page, name, body)
    args.page.write_text(page, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

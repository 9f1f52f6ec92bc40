"""Fixed thresholds on measured floats, and the margin each keeps across CPUs.

A test that compares a round-off-sized, chaotic or stochastic quantity with a fixed number
does it through the ``margin`` fixture (``margin.below(name, value, bound)``): the assertion is
the same, and when ``$GAUGELAB_MARGINS`` names a file, each comparison is appended to it as one
JSON line. ``tests/portability.sh`` runs the tests marked ``portability`` once per CPU
variation (ATen kernel level, thread count), one file each, then ``python -m
tests.support.margins DIR`` reads them all: for each quantity, its spread over the variations
(max - min) and its room to the bound (the bound minus the worst value), and it fails unless the
room is at least :data:`REQUIRED` times the spread.

A ratio to a floor, or a round-off floor itself, varies by a factor, not by an amount:
``log=True`` takes its spread and room in decades (``log10``), so a ratio of 270 to 300 against
a bound of 10 is 1.4 decades of room for 0.04 of spread.
"""

from __future__ import annotations

import json
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path

REQUIRED = 10.0
"""The room to the bound, in multiples of the spread measured over the variations."""


@dataclass
class Margins:
    """The ``margin`` fixture of one test (``nodeid`` names it in the record)."""

    nodeid: str

    def below(self, name: str, value: float, bound: float, *, log: bool = False) -> None:
        """Assert ``value < bound`` (and record it; ``log``: a positive quantity that varies by
        a factor)."""
        self._record(name, value, bound, "below", log)
        assert value < bound, f"{name}: {value!r} is not below {bound!r}"

    def above(self, name: str, value: float, bound: float, *, log: bool = False) -> None:
        """Assert ``value > bound`` (and record it)."""
        self._record(name, value, bound, "above", log)
        assert value > bound, f"{name}: {value!r} is not above {bound!r}"

    def _record(self, name: str, value: float, bound: float, side: str, log: bool) -> None:
        if not math.isfinite(value) or (log and value <= 0):
            raise AssertionError(f"{name}: measured {value!r}, not a finite (positive) number")
        if path := os.environ.get("GAUGELAB_MARGINS"):
            row = {"test": self.nodeid, "name": name, "value": float(value),
                   "bound": float(bound), "side": side, "log": log}  # fmt: skip
            with open(path, "a") as out:
                out.write(json.dumps(row) + "\n")


@dataclass(frozen=True)
class Reading:
    """One quantity over the variations."""

    test: str
    name: str
    bound: float
    side: str
    log: bool
    values: dict[str, float]  # variation → value

    def _scaled(self) -> tuple[list[float], float]:
        if self.log:
            return [math.log10(v) for v in self.values.values()], math.log10(self.bound)
        return list(self.values.values()), self.bound

    @property
    def spread(self) -> float:
        """Max - min over the variations (in decades when ``log``)."""
        values, _ = self._scaled()
        return max(values) - min(values)

    @property
    def room(self) -> float:
        """From the worst value to the bound (in decades when ``log``)."""
        values, bound = self._scaled()
        return bound - max(values) if self.side == "below" else min(values) - bound

    @property
    def holds(self) -> bool:
        return self.room > 0 and self.room >= REQUIRED * self.spread


def read(folder: Path) -> list[Reading]:
    """Every quantity recorded under ``folder`` (one ``<variation>.jsonl`` per variation).

    Raises:
        ValueError: a quantity recorded on two scales, or not in every variation.
    """
    files = sorted(folder.glob("*.jsonl"))
    seen: dict[tuple, dict] = {}
    for path in files:
        for line in path.read_text().splitlines():
            row = json.loads(line)
            key = (row["test"], row["name"], row["side"], row["bound"])  # a window: two bounds
            entry = seen.setdefault(key, {**row, "v": {}})
            if entry["log"] != row["log"]:
                raise ValueError(f"{key}: recorded on two scales")
            entry["v"][path.stem] = row["value"]
    readings = []
    for (test, name, side, bound), e in seen.items():
        if len(e["v"]) != len(files):
            missing = sorted({p.stem for p in files} - set(e["v"]))
            raise ValueError(f"{test} {name}: not recorded under {', '.join(missing)}")
        readings.append(Reading(test, name, bound, side, e["log"], e["v"]))
    return readings


def main(argv: list[str]) -> int:
    from rich.console import Console
    from rich.table import Table

    folder = Path(argv[0])
    readings = read(folder)
    if not readings:
        print(f"no threshold was recorded under {folder}", file=sys.stderr)
        return 1
    table = Table(title=f"Fixed thresholds over {len(list(folder.glob('*.jsonl')))} variations")
    for column in ("test", "quantity", "bound", "min", "max", "spread", "room ÷ spread", "scale"):
        table.add_column(column, justify="left" if column in ("test", "quantity") else "right")
    for r in sorted(readings, key=lambda r: (r.test, r.name)):
        ratio = "∞" if r.spread == 0 else f"{r.room / r.spread:.3g}"
        sign = "<" if r.side == "below" else ">"
        table.add_row(
            r.test.rsplit("::", 1)[-1][:48], r.name, f"{sign} {r.bound:.3g}",
            f"{min(r.values.values()):.4g}", f"{max(r.values.values()):.4g}",
            f"{r.spread:.2g}", ratio if r.holds else f"[red]{ratio}[/red]",
            "decades" if r.log else "linear",
        )  # fmt: skip
    Console(width=200).print(table)
    failing = [r for r in readings if not r.holds]
    for r in failing:
        print(f"margin too small: {r.test} {r.name}: room {r.room:.3g} < {REQUIRED:g} × spread "
              f"{r.spread:.3g}", file=sys.stderr)  # fmt: skip
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

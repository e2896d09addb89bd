#!/usr/bin/env python3
"""Run every ``benchmarks/bench_*.py`` and print one table; write benchmarks/results.json.

Each module has ``figures() -> list[Figure]`` (see ``_figures.py``). Run with
``make bench``, which starts a throwaway PostgreSQL server so the PostgreSQL
figures are measured too; without one they are reported as not measured.

    .venv/bin/python benchmarks/run_all.py [--only claim_cycle,create] [--json PATH]
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from _figures import Figure, figure  # noqa: E402


def _number(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}"


def render(rows: list[Figure]) -> str:
    """The table: figure, benchledger, reference (name), ratio, goal, note."""
    header = ("figure", "benchledger", "reference", "ratio", "goal", "note")
    lines = [
        (
            row["figure"],
            f"{_number(row['benchledger'])} {row['unit']}",
            f"{_number(row['reference'])} ({row['reference_name']})",
            "-" if row["ratio"] is None else f"{row['ratio']:.2f}x",
            row["goal"],
            row["note"],
        )
        for row in rows
    ]
    widths = [max(len(str(c)) for c in column) for column in zip(header, *lines, strict=False)]
    out = []
    for cells in [header, *lines]:
        out.append("  ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip())
        if cells is header:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated module names (no bench_)")
    parser.add_argument("--json", default=str(HERE / "results.json"), help="where to write")
    args = parser.parse_args(argv)
    wanted = {name.strip() for name in args.only.split(",") if name.strip()}
    modules = sorted(path.stem for path in HERE.glob("bench_*.py"))
    rows: list[Figure] = []
    failed = False
    for stem in modules:
        if wanted and stem.removeprefix("bench_") not in wanted:
            continue
        started = time.perf_counter()
        print(f"== {stem} ...", file=sys.stderr, flush=True)
        try:
            module = importlib.import_module(stem)
            got: list[Figure] = module.figures()
        except Exception:
            failed = True
            traceback.print_exc()
            got = [figure(stem, "", None, None, "-", "-", "failed: see the traceback above")]
        rows.extend(got)
        print(f"== {stem}: {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    print(render(rows))
    Path(args.json).write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    print(f"\nwritten: {args.json}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

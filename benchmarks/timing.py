"""Timing and reporting shared by the benchmarks: medians of wall time, JSON lines, a table."""

import json
import statistics
import sys
import time

import jax


def time_call(fn, *args, repeats: int = 10, min_seconds: float = 0.5) -> dict:
    """Median and minimum wall time of `fn(*args)` in ms, after one warm-up (compile) call.

    Runs at least `repeats` times and at least `min_seconds` in all, blocking on the result
    each time so that asynchronous dispatch is not mistaken for speed.
    """
    jax.block_until_ready(fn(*args))
    times, start = [], time.perf_counter()
    while len(times) < repeats or time.perf_counter() - start < min_seconds:
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    return {"ms": 1e3 * statistics.median(times), "ms_min": 1e3 * min(times), "runs": len(times)}


def report(records: list[dict], columns: list[str], path: str | None = None) -> None:
    """Prints `records` as a markdown table of `columns`; appends them as JSON lines to `path`."""
    if path:
        with open(path, "a", encoding="utf-8") as f:
            for record in records:
                f.write(json.dumps(record) + "\n")
    cells = [[_cell(r.get(c)) for c in columns] for r in records]
    widths = [max([len(c), *(len(row[i]) for row in cells)]) for i, c in enumerate(columns)]
    print("| " + " | ".join(c.ljust(w) for c, w in zip(columns, widths)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in cells:
        print("| " + " | ".join(v.ljust(w) for v, w in zip(row, widths)) + " |")
    sys.stdout.flush()


def _cell(value) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"
    return "" if value is None else str(value)

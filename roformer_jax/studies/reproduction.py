"""A committed run retrained at another commit: are its numbers the record's?

    record = compare_records(committed_records, rerun_records)   # metrics.jsonl records each
    summary(record)   # "bit-identical (200 steps, 12 metrics)" or the largest differences

experiments/reproduce.py writes the record (plus the rerun's commit and machine) as
reproduced.json beside the run's raw files; the results page quotes `summary`.
"""

from __future__ import annotations

FILE = "reproduced.json"
CLOCKS = ("elapsed_s", "tokens_per_s")  # a key ending in one of these is a time, not a result


def compare_records(committed: list[dict], rerun: list[dict]) -> dict:
    """{"steps", "metrics", "identical", "largest"}: the steps both logged, the number of
    metrics compared, whether every value of every step is the same float, and for each
    metric that differs its largest |difference|. A step or metric that one of them lacks is
    a ValueError: the runs did not log the same things."""
    by_step = {r["step"]: r for r in rerun}
    if [r["step"] for r in committed] != list(by_step):
        raise ValueError(f"the rerun logged steps {list(by_step)[:5]}..., the record "
                         f"{[r['step'] for r in committed][:5]}...")  # fmt: skip
    largest, keys = {}, set()
    for old in committed:
        new = by_step[old["step"]]
        results = {k for k in old if k != "step" and not k.endswith(CLOCKS)}
        if results != {k for k in new if k != "step" and not k.endswith(CLOCKS)}:
            raise ValueError(f"step {old['step']}: the rerun logged other metrics")
        keys |= results
        for key in results:
            if old[key] != new[key]:
                largest[key] = max(largest.get(key, 0.0), abs(old[key] - new[key]))
    return {"steps": len(committed), "metrics": len(keys), "identical": not largest,
            "largest": largest}  # fmt: skip


def summary(record: dict) -> str:
    """One sentence: bit-identical, or the largest difference and the metric it was in."""
    counted = f"{record['steps']} logged steps, {record['metrics']} metrics"
    if record["identical"]:
        return f"bit-identical ({counted})"
    key, value = max(record["largest"].items(), key=lambda kv: kv[1])
    return (
        f"not bit-identical ({counted}; {len(record['largest'])} differ), by at most "
        f"{value:.1e} (in {key})"
    )

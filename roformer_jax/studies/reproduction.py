"""A committed run retrained at another commit: are its numbers the record's?

    record = compare_records(committed_records, rerun_records)   # metrics.jsonl records each
    summary(record)   # "bit-identical (200 steps, 12 metrics)" or the largest differences
    compare_records(committed_records, rerun_records, until=2000)   # a long run's start only
    trained_version(provenance_record)   # the commit and machine of a run trained elsewhere

experiments/reproduce.py writes the record (plus the rerun's commit and machine) as
reproduced.json beside the run's raw files; the results page quotes `summary`.
"""

from __future__ import annotations

import json

FILE = "reproduced.json"
CLOCKS = ("elapsed_s", "tokens_per_s")  # a key ending in one of these is a time, not a result


def compare_records(committed: list[dict], rerun: list[dict], *, until: int | None = None) -> dict:
    """{"steps", "metrics", "identical", "largest", "final", "only_record", "only_rerun"}: the
    steps both logged, the number of metrics both logged, whether each of those is the same
    float at every step, the largest relative difference |a − b| / max(|a|, |b|) of each that
    is not, the final validation losses [record, rerun] (what the study's tables read), and
    the metrics only one of them logged (a trainer that logs more than it did). Other steps
    are a ValueError: the runs did not log at the same points.

    until: the rerun trained the run's first `until` steps only (on the whole schedule): the
    records are compared to that step, "final" is theirs there, and {"until", "of_steps"}
    say how far of how many steps the comparison goes."""
    whole = committed[-1]["step"] if committed else 0
    if until is not None and until < whole:
        committed, rerun = ([r for r in rs if r["step"] <= until] for rs in (committed, rerun))
    else:
        until = None
    by_step = {r["step"]: r for r in rerun}
    if [r["step"] for r in committed] != list(by_step):
        raise ValueError(
            f"the rerun logged steps {list(by_step)[:5]}..., the record "
            f"{[r['step'] for r in committed][:5]}..."
        )
    largest, shared, only_record, only_rerun = {}, set(), set(), set()
    for old in committed:
        new = by_step[old["step"]]
        a, b = ({k for k in r if k != "step" and not k.endswith(CLOCKS)} for r in (old, new))
        only_record |= a - b
        only_rerun |= b - a
        shared |= a & b
        for key in a & b:
            if old[key] != new[key]:  # relative: a perplexity and a loss on one scale
                change = abs(old[key] - new[key]) / max(abs(old[key]), abs(new[key]))
                largest[key] = max(largest.get(key, 0.0), change)
    last = by_step[committed[-1]["step"]] if committed else {}
    final = {
        k: [v, last[k]]
        for k, v in (committed[-1] if committed else {}).items()
        if k.startswith("valid/loss") and k in last
    }
    record = {
        "steps": len(committed),
        "metrics": len(shared),
        "identical": not largest,
        "largest": largest,
        "final": final,
        "only_record": sorted(only_record),
        "only_rerun": sorted(only_rerun),
    }
    return record if until is None else record | {"until": until, "of_steps": whole}


def summary(record: dict) -> str:
    """One sentence: bit-identical, or the largest relative difference of a loss (of any
    metric, where no loss differs) and where it was, with the final validation losses (over
    how many of the run's steps, where the rerun stopped early); and the metrics only one of
    the two logged."""
    counted = f"{record['steps']} logged steps, {record['metrics']} metrics"
    over, when = "", "final"
    if record.get("until"):
        over = f" over its first {record['until']:,} of {record['of_steps']:,} steps"
        when = f"at step {record['until']:,}"
    if record["identical"]:
        text = f"bit-identical{over} ({counted})"
    else:
        # The losses, which the tables read; an accuracy near 0 early on has large relative
        # changes that say little.
        losses = {k: v for k, v in record["largest"].items() if "loss" in k}
        key, value = max((losses or record["largest"]).items(), key=lambda kv: kv[1])
        text = (
            f"not bit-identical{over} ({counted}; {len(record['largest'])} differ), the "
            f"{'losses' if losses else 'metrics'} by at most {value:.1e} relative (in "
            f"{key})"
        )
        for name, (old, new) in record.get("final", {}).items():
            text += f"; {when} {name} {old:.4f} then, {new:.4f} now"
    for which, keys in (
        ("the record", record.get("only_record")),
        ("the rerun", record.get("only_rerun")),
    ):
        if keys:
            text += f"; only {which} logged {', '.join(keys)}"
    return text


def trained_version(provenance: dict | None) -> dict:
    """{"commit", "dirty", "machine"} of a run trained in one code version, from its
    provenance.json: the rerun's fields of a record whose rerun is a run already trained (in
    another study, from the same config). A ValueError where it has no sessions, or resumed
    at another commit or on another machine: such a run is not one version's numbers."""
    keys = ("commit", "dirty", "machine")
    sessions = (provenance or {}).get("sessions", [])
    versions = {json.dumps({k: s.get(k) for k in keys}, sort_keys=True) for s in sessions}
    if len(versions) != 1:
        raise ValueError(
            f"a run trained in one code version has one, not {len(versions)}: {sorted(versions)}"
        )
    return json.loads(versions.pop())

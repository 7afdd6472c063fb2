"""What training did to a position table: how far it moved, and whether its rows became smooth.

    change = table_change(initial_table, final_table)   # [P, E] each, host arrays
    change["neighbor_cosine"]   # ~0 for a random table, ~1 for BERT's trained, smooth ones

Read by experiments/position_table.py for every checkpoint of a study's learned-table runs.
"""

from __future__ import annotations

import numpy as np

POSITION_TABLE_FILE = "position_table.json"  # {"step", "position", "word": table_change}
POSITION_TABLE_STEPS_FILE = "position_table_steps.json"  # a list of the same, one per checkpoint


def table_change(initial: np.ndarray, final: np.ndarray) -> dict[str, float]:
    """What training did to an embedding table [P, E] (a learned position table, or the word
    table for comparison).

    moved: ||final - initial|| / ||initial|| (Frobenius); row_norm, row_norm_initial: the
    mean L2 norm of a row; neighbor_cosine: the mean cosine of rows p and p + 1 of `final`,
    near 0 for a random table and near 1 for the smooth tables that BERT's positions become.
    """
    initial, final = np.asarray(initial, np.float64), np.asarray(final, np.float64)
    rows = final / np.linalg.norm(final, axis=-1, keepdims=True)
    return {
        "moved": float(np.linalg.norm(final - initial) / np.linalg.norm(initial)),
        "row_norm": float(np.linalg.norm(final, axis=-1).mean()),
        "row_norm_initial": float(np.linalg.norm(initial, axis=-1).mean()),
        "neighbor_cosine": float((rows[1:] * rows[:-1]).sum(-1).mean()),
    }

"""Items frames shaped as the store returns them, built by hand for the statistics and report tests."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd


def items_frame(rows: Sequence[tuple[str, str, str, bool | None]], run_id: int = 1, endpoint: str = "ep",
                task: str = "gsm8k", **columns: object) -> pd.DataFrame:
    """(item_id, item_hash, status, correct) rows; every other stored column taken from `columns`, else filled
    per item: extracted `<endpoint>-<item>`, reference `ref-<item>`, completion_tokens 100 x run_id + row."""
    frame = pd.DataFrame(list(rows), columns=["item_id", "item_hash", "status", "correct"])
    filled: dict[str, object] = {
        "run_id": run_id, "endpoint": endpoint, "task": task,
        "extracted": [f"{endpoint}-{item}" for item in frame["item_id"]],
        "reference": [f"ref-{item}" for item in frame["item_id"]],
        "completion_tokens": [100 * run_id + i for i in range(len(frame))],
        "reasoning_tokens": None, "prompt_tokens": 50, "finish_reason": "stop", "latency_s": 1.0,
    }
    for column, value in {**filled, **columns}.items():
        frame[column] = value
    return frame

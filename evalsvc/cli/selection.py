"""Which stored runs a report read: named in every report, with their item counts.

An endpoint name stands for one run per task, picked by the decision
module's rule (`evalsvc.decision.pick`: the latest complete run with the
ladder's settings and at least its item count, so a small later run never
replaces a full one); the runs passed over are listed with the reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from db.engine import Store


def runs_used(store: Store, steps: Sequence[str], tasks: Sequence[str] | None = None,
              force: bool = False) -> dict[str, list[dict[str, Any]]]:
    """{"used": [{task, step, run_id, n_items}], "set_aside": [...]} for endpoint names (run ids: just those)."""
    from evalsvc.decision.build import load_records
    from evalsvc.decision.pick import pick_runs

    with store.session() as session:
        if all(step.isdigit() for step in steps):
            from db import queries

            runs = [queries.resolve_run(session, step) for step in steps]
            return {"used": [{"task": r.task, "step": r.endpoint.name, "run_id": r.id, "n_items": r.n_items}
                             for r in runs], "set_aside": []}
        records = load_records(session, steps)
    picked = pick_runs(records, steps, tasks, force)
    used = [{"task": task, "step": step, "run_id": run.info.run_id, "n_items": run.n_items}
            for (task, step), run in picked.chosen.items()]
    return {"used": used, "set_aside": [a.to_dict() for a in picked.aside]}


def render_runs_used(selection: dict[str, list[dict[str, Any]]], markdown: bool = False) -> str:
    """One line per task naming each step's run and its items, then the runs set aside and why."""
    by_task: dict[str, list[str]] = {}
    for row in selection["used"]:
        by_task.setdefault(row["task"], []).append(f"{row['step']} run {row['run_id']} ({row['n_items']} items)")
    bullet = "- " if markdown else "  "
    lines = ["Runs used" + (" (newer runs set aside below)" if selection["set_aside"] else "")]
    lines += [f"{bullet}{task}: {', '.join(runs)}" for task, runs in by_task.items()]
    lines += [f"{bullet}set aside: {a['step']} {a['task']} run {a['run_id']}: {a['reason']} ({a['detail']})"
              for a in selection["set_aside"]]
    return "\n".join(lines)

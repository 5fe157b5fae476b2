"""One home for "stop at step N or take step N+1": verdicts, lengths, task time, decisions.

- `rule`: the accuracy verdict rule (one interval, one margin per task) and
  what would settle an inconclusive verdict; pure.
- `workload`: a per-workload decision (take B, stop at A, can't tell yet)
  with typed reasons, from figures already computed; pure.
- `pick`: which stored run stands for each ladder step and task, and which
  runs are set aside and why; pure.
- `build`: from the store to every comparison, length, task time and decision
  of a ladder or a pair. `compare`, `report`, `decide` and the dashboard all
  call it and only format what it returns.

Nothing is imported here so that `evalsvc.report.accuracy_report` can use `rule` without a cycle.
"""

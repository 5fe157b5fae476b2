"""One home for "stop at step N or take step N+1": verdicts, lengths, task time, decisions.

- `rule`: the accuracy verdict rule (one interval, one margin per task) and
  what would settle an inconclusive verdict; pure.
- `compare`: one `Comparison` (figures and verdict) per task and pair of runs,
  and a `LadderReport` over a ladder's steps; pure.
- `workload`: a per-workload decision (take B, stop at A, can't tell yet)
  with typed reasons, from figures already computed; pure.
- `pick`: which stored run stands for each ladder step and task, and which
  runs are set aside and why; pure.
- `build`: from the store to every comparison, length, task time and decision
  of a ladder or a pair. The `compare`, `report` and `decide` commands and
  the dashboard all call it and only format what it returns.

Nothing is imported here, so that importing one module of the package loads only what that module needs.
"""

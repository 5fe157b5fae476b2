"""Statistics: pure functions on item frames and token counts, no I/O.

- `paired_tests`: pairing two runs item by item, McNemar, the Newcombe interval,
  the minimum detectable effect, Holm, Cochran's Q and the flip rate.
- `output_length`: output tokens of step B against step A, and the task-time model.
"""

"""Statistics: pure functions on item frames, token counts and speed samples; no I/O.

- `pairing`: which items two runs both answered (and what was left out, and why).
- `paired_tests`: McNemar, the Newcombe interval, the minimum detectable effect,
  Holm, Cochran's Q and the flip rate on paired correctness.
- `output_length`: output tokens of step B against step A on paired items.
- `task_time`: the task-time model, mean time per task of B against A.
- `speed`: the summary of an endpoint's measured speed samples (medians, mean with its interval).
- `bootstrap`: the percentile bootstrap the length, time and speed intervals share.
"""

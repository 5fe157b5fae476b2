"""Reports: figures turned into tables and words, and results that leave the store.

- `accuracy_report`: comparisons of two runs and of a ladder of runs, in words and tables (text or Markdown).
- `decision_report`: decisions, lengths and speed summaries in words (the figures come from `evalsvc.decision`).
- `export`: one run's items and summary as JSONL, CSV or JSON.
- `masking`: passwords and keys masked in what the command line and the dashboard show and log.
- `token_counts`: which runs have too many unknown token counts to be read without a warning.
"""

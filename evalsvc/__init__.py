"""evalsvc: runner, statistics, task-time model, decision report and CLI."""

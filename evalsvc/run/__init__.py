"""Running an evaluation: the runner, speed measurement, status lines and stop signals.

- `runner`: one endpoint on one task, every item stored as it finishes, resume by identity.
- `speed`: an endpoint's batch-1 speed per workload, measured and stored.
- `status`: one-line announcements and heartbeats for long steps.
- `interrupts`: SIGTERM and SIGHUP stop a command the way Ctrl-C does.
- `command`: what `evalsvc run` can evaluate and its defaults, as the command line and the dashboard's jobs offer it.
"""

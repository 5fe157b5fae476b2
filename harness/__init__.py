"""Endpoint client, benchmark tasks, scoring and the code sandbox.

Knows nothing of SQL, the CLI or the dashboard.
"""

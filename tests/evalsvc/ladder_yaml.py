"""Ladder-file pieces the ladder tests share."""

from __future__ import annotations

import json
import sys

CRASH = [sys.executable, "-c", "import sys; print('loading weights'); print('CUDA out of memory'); sys.exit(3)"]


def crashing_step(name: str) -> str:
    """A step (one YAML list item under `steps:`) whose launch command prints a CUDA out-of-memory line and exits
    with code 3 before its server ever answers (start timeout 20 s)."""
    return f"""
  - name: {name}
    base_url: http://127.0.0.1:9/v1
    model: fake-model
    launch:
      command: {json.dumps(CRASH)}
      health_url: http://127.0.0.1:9/v1/models
      startup_timeout_s: 20
"""

"""Where evalsvc keeps its own files on this machine: the embedded engine, launch records, step times, logs."""

from __future__ import annotations

import os
from pathlib import Path

HOME_ENV = "EVALSVC_HOME"


def evalsvc_home() -> Path:
    """`$EVALSVC_HOME`, or `~/.cache/evalsvc`."""
    return Path(os.environ.get(HOME_ENV) or Path.home() / ".cache" / "evalsvc").expanduser()

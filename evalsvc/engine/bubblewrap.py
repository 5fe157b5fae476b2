"""The demo's set-up of the HumanEval sandbox: bubblewrap, installed when it
is missing and this machine lets us (root with apt-get, as `.ci/setup` does).

Anywhere else the sandbox's self-check stops the demo before anything is
built or scored, with the command to run (see `harness.sandbox.require_isolation`).
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess

from evalsvc.run.status import STATUS_LOGGER

log = logging.getLogger(STATUS_LOGGER)

INSTALL_COMMAND = ("apt-get", "install", "-y", "-qq", "bubblewrap")


def ensure_bubblewrap(isolation: str) -> None:
    """Install bubblewrap with apt-get when `isolation` needs it, it is not
    on PATH, and this process is root on a machine with apt-get; say so."""
    if isolation != "bwrap" or shutil.which("bwrap") or os.geteuid() != 0 or shutil.which("apt-get") is None:
        return
    log.info("bubblewrap (the HumanEval sandbox) is missing; installing it: %s", " ".join(INSTALL_COMMAND))
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (("apt-get", "update", "-qq"), INSTALL_COMMAND):
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900, check=False)
        if done.returncode != 0:
            log.info("%s failed: %s", " ".join(command), done.stderr.strip()[-300:])
            return
    from harness.sandbox import forget_bwrap_probe

    forget_bwrap_probe()

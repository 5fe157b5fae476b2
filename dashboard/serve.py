"""`python -m dashboard.serve [streamlit run options] [-- app options]`: `streamlit run` on the dashboard's
app, with the dashboard's heavy imports done before the server listens.

`evalsvc dashboard` starts this module by name, so evalsvc never imports the
dashboard package nor needs to know where its files are.

Streamlit runs a page's script only when a browser connects, so without this
the first person to open the dashboard after a start waits for pandas, SciPy,
SQLAlchemy and the statistics to import, and for the whole ladder to
be computed (seconds on a busy machine). The server process is the one that
later runs the scripts and holds their caches, so importing here, and
computing every page's first view in a thread while the server starts, is
done once for all of them.

The server says it is ready (`/_stcore/health`, which the browser asks before
it connects) only once that is done: a page opened earlier waited for the same
results while the warm-up and the page's script took turns with the
interpreter, which made every first view slower than the warm-up alone.
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import logging
import os
import sys
import threading
import time

# Before NumPy loads: the bootstrap's small matrix products ran 4x slower with a BLAS thread per core on a
# busy 2-core machine (threads waiting on each other), and a page's requests are served one thread each.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
from pathlib import Path

log = logging.getLogger(__name__)

APP = Path(__file__).resolve().parent / "app.py"


def preload() -> None:
    """Import what every page needs; the pages find it in `sys.modules`."""
    import pandas  # noqa: F401
    import scipy.stats  # noqa: F401
    import sqlalchemy  # noqa: F401

    import PIL.Image  # noqa: F401  (the page icon)
    import streamlit.delta_generator
    import streamlit.web.bootstrap  # noqa: F401  (the server)

    import dashboard.analysis  # noqa: F401  (not dashboard.data: see warm_up)
    import evalsvc.decision.build  # noqa: F401
    import evalsvc.report.decision_report  # noqa: F401

    # The first element a script shows makes Streamlit check whether it runs in a REPL by walking the stack
    # with `inspect`, which resolves the path of every loaded module: up to a second on a busy machine, on
    # the first view. Run by `streamlit run`, it never is; the check's answer is known.
    if hasattr(streamlit.delta_generator, "_use_warning_has_been_displayed"):
        streamlit.delta_generator._use_warning_has_been_displayed = True
    # What is loaded now stays for the server's life: out of the collector's sight, the full collection
    # Streamlit makes after every script run (a quarter of a second with all of it) has little left to scan.
    gc.freeze()


RUNTIME_WAIT_S = 60.0
READY_WAIT_S = 60.0  # longest a health check waits for the warm-up; then the pages compute their own views
WARMED = threading.Event()


def warm_up(argv: list[str]) -> None:
    """Compute every page's first view into the server's caches; a failure only costs the first view its speed.

    `dashboard.data` is imported only once Streamlit's runtime exists: its data caches are made when their
    functions are defined, and before the runtime exists Streamlit makes stand-ins and warns about each on
    the console. Meanwhile the migration tool that opening the store imports is loaded.
    """
    import alembic.command  # noqa: F401
    import alembic.config  # noqa: F401
    from streamlit import runtime

    script_args = argv[argv.index("--") + 1:] if "--" in argv else []
    try:
        deadline = time.monotonic() + RUNTIME_WAIT_S
        while not runtime.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        from dashboard import charts, data, job_manager, widgets  # noqa: F401  (the pages' modules, imported once)

        compile_scripts(runtime.get_instance())
        url = data.db_url(script_args)
        default = data.warm_up(url)
        if default is not None:  # the Length and time page's charts
            charts.length_drawings(url, default.key_a, default.key_b, widgets.Pair(default.task, default.a, default.b),
                                default.order)
    except Exception:  # the page will show the same problem, in words, when it is opened
        log.warning("warming up the dashboard's caches failed", exc_info=True)
    finally:
        WARMED.set()


def ready_once_warm(runtime_class: type, warmed: threading.Event, wait_s: float) -> None:
    """Make `runtime_class`'s readiness (what `/_stcore/health` answers) wait for `warmed`, at most `wait_s`
    per check, without holding up the server's other requests. Left as it is if a Streamlit release has no such
    property: it only saves time."""
    current = inspect.getattr_static(runtime_class, "is_ready_for_browser_connection", None)
    if not isinstance(current, property) or current.fget is None:
        return
    original = current.fget

    async def ready(self: object) -> tuple[bool, str]:
        deadline = time.monotonic() + wait_s
        while not warmed.is_set() and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        return await original(self)

    runtime_class.is_ready_for_browser_connection = property(ready)  # type: ignore[attr-defined]


def compile_scripts(server_runtime: object) -> None:
    """Compile the app and page scripts into Streamlit's script cache, which otherwise compiles each on its
    first view (a tenth of a second or two on a busy machine). Skipped if a Streamlit release lays it out
    otherwise: it only saves time."""
    from dashboard import widgets

    cache = getattr(server_runtime, "_script_cache", None)
    if cache is None or not hasattr(cache, "get_bytecode"):
        return
    for script in (APP, *(APP.parent / page for page in widgets.PAGES.values())):
        cache.get_bytecode(str(script))


def main() -> None:
    preload()
    from streamlit.runtime import Runtime

    ready_once_warm(Runtime, WARMED, READY_WAIT_S)
    threading.Thread(target=warm_up, args=(list(sys.argv),), daemon=True, name="dashboard-warm-up").start()
    from streamlit.web import cli

    sys.argv = ["streamlit", "run", str(APP), *sys.argv[1:]]
    cli.main()


if __name__ == "__main__":
    main()

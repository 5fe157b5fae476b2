"""Store fixtures: every store test runs on a fresh SQLite file, and on PostgreSQL too.

PostgreSQL is selected by `EVALSVC_TEST_PG` or a PostgreSQL `EVALSVC_DB` (a
SQLAlchemy URL; default the role and database `.ci/setup` creates). Locally, an unreachable server skips
the PostgreSQL cases with the reason shown by `-ra`; in CI (`CI=true`) it fails
them, so a broken database setup can never pass as green.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Iterator

import pytest
from sqlalchemy import create_engine, inspect, make_url, text

from db.engine import Store, StoreError, open_store, schema_state
from db.models import Base
from tests.conftest import skip_or_fail

PG_ENV = "EVALSVC_TEST_PG"
DEFAULT_PG_URL = "postgresql+psycopg://evalsvc:evalsvc@127.0.0.1:5432/evalsvc_test"
STORE_TABLES = set(Base.metadata.tables)
BACKENDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]


def pg_url() -> str:
    """EVALSVC_TEST_PG, else EVALSVC_DB when it names a PostgreSQL server, else the CI default; under
    pytest-xdist, a database of this worker's own beside it (see `worker_database`)."""
    store_url = os.environ.get("EVALSVC_DB", "")
    url = os.environ.get(PG_ENV) or (store_url if store_url.startswith("postgresql") else DEFAULT_PG_URL)
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    return worker_database(url, worker) if worker else url


@functools.cache
def worker_database(url: str, worker: str) -> str:
    """The URL of database `<name>_<worker>` on the server of `url`, made once if missing: tests wipe their
    database, so two workers must never share one. An unreachable server leaves the URL for `require_pg` to
    report."""
    parsed = make_url(url)
    own = parsed.set(database=f"{parsed.database}_{worker}")
    if pg_problem(url) is None and pg_problem(own.render_as_string(hide_password=False)) is not None:
        admin = create_engine(url, isolation_level="AUTOCOMMIT")
        try:
            with admin.connect() as conn:
                conn.execute(text(f'CREATE DATABASE "{own.database}"'))
        finally:
            admin.dispose()
    return own.render_as_string(hide_password=False)


def pg_problem(url: str) -> str | None:
    """Why the PostgreSQL server at `url` cannot be used, or None when it answers."""
    try:
        engine = create_engine(url, connect_args={"connect_timeout": 3})
        with engine.connect() as conn:
            conn.execute(text("select 1"))
        engine.dispose()
    except Exception as exc:  # any driver or network failure means "not available"
        return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
    return None


def require_pg(keep_empty_store: bool = False) -> str:
    """The PostgreSQL URL, wiped to an empty public schema; skip (or fail in CI) when unreachable.

    With `keep_empty_store`, a database that holds exactly an evalsvc store at the latest revision (what a
    previous test's migrations built) is emptied of its rows instead: the same empty store, in less than half
    the time of re-running every migration on PostgreSQL.
    """
    url = pg_url()
    problem = pg_problem(url)
    if problem is not None:
        skip_or_fail(f"PostgreSQL at {url.split('@')[-1]} ({PG_ENV}) is not reachable: {problem} "
                     "(.ci/setup starts the server)")
    if not (keep_empty_store and emptied_store(url)):
        reset_pg(url)
    return url


def emptied_store(url: str) -> bool:
    """Delete every row of the store at `url` (id sequences restarted) when it is exactly an evalsvc store at the
    latest revision; False, touching nothing, when it is anything else."""
    try:
        state = schema_state(url)
    except StoreError:  # an empty database, or one holding other tables
        return False
    engine = create_engine(url)
    try:
        if not state.up_to_date or set(inspect(engine).get_table_names()) != STORE_TABLES | {"alembic_version"}:
            return False
        quote = engine.dialect.identifier_preparer.quote
        with engine.begin() as conn:
            conn.execute(text(f"TRUNCATE {', '.join(quote(t) for t in sorted(STORE_TABLES))} RESTART IDENTITY"))
        return True
    finally:
        engine.dispose()


def reset_pg(url: str) -> None:
    """Drop everything the previous test left, so each test starts from an empty database."""
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("DROP SCHEMA IF EXISTS public CASCADE"))
        conn.execute(text("CREATE SCHEMA public"))
    engine.dispose()


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store URL with nothing stored: a new SQLite file, or a PostgreSQL database either wiped or holding an
    emptied store at the latest revision (see `require_pg`)."""
    return new_store_url(request.param, tmp_path, keep_empty_store=True)


@pytest.fixture(params=BACKENDS)
def wiped_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty database URL: a new SQLite file, or a wiped PostgreSQL database (opening it runs every migration)."""
    return new_store_url(request.param, tmp_path, keep_empty_store=False)


def new_store_url(backend: str, tmp_path: Path, keep_empty_store: bool) -> str:
    return f"sqlite:///{tmp_path / 'store.db'}" if backend == "sqlite" else require_pg(keep_empty_store)


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    opened = open_store(store_url)
    yield opened
    opened.dispose()

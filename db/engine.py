"""Opening the store: an SQLAlchemy engine on any URL, SQLite (WAL) by default,
brought to the latest schema with Alembic."""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, Engine, create_engine, event, inspect
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from harness.errors import UserError
from harness.redact import mask_text, mask_url

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

DB_ENV = "EVALSVC_DB"
MIGRATIONS = Path(__file__).parent / "migrations"
# Any constant shared by every evalsvc process: the key of the PostgreSQL advisory lock held while migrating.
MIGRATION_LOCK_KEY = 0x65766C73


class StoreError(UserError):
    """The store cannot be opened or migrated."""


class NoStore(StoreError):
    """There is no evalsvc store at the URL yet (and the caller asked not to make one)."""


def data_dir() -> Path:
    """The user's evalsvc data folder (the default store, the dashboard's jobs): $XDG_DATA_HOME/evalsvc."""
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share") / "evalsvc"


DEFAULT_DB_SHOWN = "~/.local/share/evalsvc/evalsvc.db"  # how help texts name the default store file


def default_db_url() -> str:
    """$EVALSVC_DB, else an SQLite file in the user's data folder."""
    if os.environ.get(DB_ENV):
        return os.environ[DB_ENV]
    return f"sqlite:///{data_dir() / 'evalsvc.db'}"


def to_url(db: str | None) -> str:
    """A SQLAlchemy URL for a `--db` value: a URL, or a plain file path (taken as SQLite).

    SQLite URLs come back with an absolute path, so every message names the
    file really opened; a misspelt `sqlite:` URL is refused, never read as a
    file name.
    """
    if not db:
        return default_db_url()
    if "://" not in db:
        if db.lower().startswith("sqlite:"):
            raise StoreError(_sqlite_spelling(db, db.split(":", 1)[1]))
        return f"sqlite:///{Path(db).expanduser().resolve()}"
    if not db.lower().startswith("sqlite"):
        return db
    path, query = _sqlite_parts(db)
    if not path or path == ":memory:":
        raise StoreError(f"--db {db} is an in-memory SQLite database, which keeps nothing; give a file path")
    if not Path(path).expanduser().is_absolute() and not Path(path).parent.is_dir():
        raise StoreError(f"--db {db} names {path} relative to {Path.cwd()}, and folder {Path(path).parent} "
                         f"is not there; for /{path} write sqlite:////{path} or just --db /{path}")
    scheme = db.split("://", 1)[0]
    return f"{scheme}:///{Path(path).expanduser().resolve()}" + (f"?{query}" if query else "")


def _sqlite_parts(url: str) -> tuple[str, str]:
    """(database path, query string) of a SQLite URL, the path as SQLAlchemy reads it."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise StoreError(f"--db {url} is not a valid SQLAlchemy URL: {_first_line(exc)}") from exc
    query = url.split("?", 1)[1] if "?" in url else ""
    return parsed.database or "", query


def _sqlite_spelling(given: str, path: str) -> str:
    absolute = Path(path).expanduser().resolve()
    return (f"--db {given} is not a SQLAlchemy URL (SQLite URLs start with sqlite:///, and an absolute path "
            f"adds a fourth slash); write --db sqlite:///{absolute} or just --db {absolute}")


@dataclass(frozen=True)
class Store:
    url: str = field(repr=False)  # holds the password, if any: show `display_url` instead
    engine: Engine
    sessions: sessionmaker[Session]
    # Until a new store's tables are made (on its first session): the callback that announces it.
    _pending: list[Callable[["Store"], None]] = field(default_factory=list, repr=False, compare=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def display_url(self) -> str:
        """The store URL for people, password masked."""
        return mask_url(self.url)

    def session(self) -> Session:
        if self._pending:
            self._create()
        return self.sessions()

    def _create(self) -> None:
        with self._lock:
            if not self._pending:
                return
            with _store_errors(self.url):
                upgrade_schema(self.engine)
            self._pending.pop()(self)

    def dispose(self) -> None:
        self.engine.dispose()


def open_store(db: str | None = None, migrate: bool = True, create: bool = True,
               on_create: Callable[[Store], None] | None = None) -> Store:
    """Open the evalsvc store at `db` and bring it to the latest schema; raises StoreError naming the URL.

    With `create` False, a store that does not exist yet is refused rather
    than made. A database that holds other tables than an evalsvc store's is
    refused either way and never altered. A new SQLite file is made only in
    an existing folder, or in the default store's folder. With `on_create`,
    a new store is made only when first used (its first session), and
    `on_create(store)` is called then: a command that fails before it writes
    anything leaves no store behind.
    """
    url = to_url(db)
    with _store_errors(url):
        if url.startswith("sqlite"):
            is_new = _check_sqlite_file(url, create)
        engine = _make_engine(url)
        if not url.startswith("sqlite"):
            is_new = _check_tables(url, set(inspect(engine).get_table_names()), create)
        store = Store(url=url, engine=engine, sessions=sessionmaker(engine, expire_on_commit=False))
        if is_new and on_create is not None:
            store._pending.append(on_create)
        elif migrate:
            upgrade_schema(engine)
        else:
            inspect(engine).get_table_names()
    return store


@contextmanager
def _store_errors(url: str) -> Iterator[None]:
    """Driver and I/O failures while opening or making the store, as a StoreError naming the URL."""
    try:
        yield
    except ImportError as exc:
        raise StoreError(
            f"cannot open database {mask_url(url)}: its driver is not installed ({exc.name}); "
            "for PostgreSQL: pip install 'evalsvc[postgres]'"
        ) from exc
    except (SQLAlchemyError, OSError) as exc:
        raise StoreError(
            f"cannot open database {mask_url(url)}: {exc.__class__.__name__}: {mask_text(_first_line(exc))}"
        ) from exc


def _check_sqlite_file(url: str, create: bool) -> bool:
    """Whether the SQLite store at `url` is new; StoreError when it must not be opened or made."""
    path = Path(_sqlite_parts(url)[0])
    if path.is_dir():
        raise StoreError(f"cannot open database {url}: {path} is a folder; give a file path")
    if path.exists():
        return _check_tables(url, _sqlite_tables(path), create)
    if not create:
        raise NoStore(f"no evalsvc store at {path}; {_default_note()}; `evalsvc run` creates a store")
    default = Path(_sqlite_parts(default_db_url())[0]) if default_db_url().startswith("sqlite") else None
    if path == default:
        path.parent.mkdir(parents=True, exist_ok=True)
    elif not path.parent.is_dir():
        raise StoreError(f"cannot open database {url}: folder {path.parent} does not exist; "
                         "create it first or give another --db")
    return True


def _sqlite_tables(path: Path) -> set[str]:
    """The tables of an existing SQLite file, read without changing it (no pragma, no journal switch)."""
    import sqlite3

    try:
        conn = sqlite3.connect(f"{path.as_uri()}?mode=rw", uri=True, timeout=60)
        try:
            return {row[0] for row in conn.execute("select name from sqlite_master where type = 'table'")}
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"{path} is not an SQLite database ({exc}); give the path of an evalsvc store") from exc


def _check_tables(url: str, tables: set[str], create: bool) -> bool:
    """Whether the database is empty (a new store); StoreError when it holds anything but an evalsvc store."""
    if not tables:
        if not create:
            raise NoStore(f"no evalsvc store in {store_location(url)} (the database is empty); {_default_note()}; "
                             "`evalsvc run` creates a store")
        return True
    if "alembic_version" not in tables or not tables & _STORE_TABLES:
        shown = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
        raise StoreError(f"{store_location(url)} is not an evalsvc store (it holds the tables {shown}); "
                         "evalsvc leaves it untouched, give another --db")
    return False


_STORE_TABLES = {"endpoints", "runs", "items"}


def _default_note() -> str:
    source = f" (from ${DB_ENV})" if os.environ.get(DB_ENV) else ""
    return f"the default store is {store_location(default_db_url())}{source}"


def _make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": 60})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return create_engine(url, pool_pre_ping=True)


def _sqlite_pragmas(dbapi_conn, _record) -> None:  # type: ignore[no-untyped-def]
    # WAL lets the dashboard read while runs write; busy_timeout makes concurrent
    # writers wait for each other instead of failing with "database is locked".
    # busy_timeout comes first: switching a new file to WAL itself needs a lock.
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA busy_timeout=60000")
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


def upgrade_schema(engine: Engine) -> None:
    """Apply every Alembic migration not yet applied.

    Safe when several processes open the same new store at once: the upgrade
    runs under a lock (SQLite: BEGIN IMMEDIATE; PostgreSQL: an advisory lock)
    and re-reads the applied revision once it holds it, so only the first
    process creates the tables and the others find them done.
    """
    from alembic.runtime.environment import EnvironmentContext

    if _at_head(engine):
        return
    script = _scripts()
    with engine.begin() as conn:
        _lock_for_migration(conn)
        if _at_head(conn):
            return
        cfg = _alembic_config()
        cfg.attributes["connection"] = conn
        # What `alembic.command.upgrade(cfg, "head")` does, on the migration scripts this process already read.
        with EnvironmentContext(cfg, script, fn=lambda applied, _context: script._upgrade_revs("head", applied),
                                destination_rev="head"):
            script.run_env()


def _alembic_config() -> "Config":
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    return cfg


@functools.cache
def _scripts() -> "ScriptDirectory":
    """The migration scripts, read once per process (reading them costs more than a new store's DDL)."""
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(_alembic_config())
    script.get_heads()  # builds the revision map now, before any thread shares it
    return script


def _at_head(bind: Engine | Connection) -> bool:
    from alembic.runtime.migration import MigrationContext

    heads = set(_scripts().get_heads())
    if isinstance(bind, Engine):
        with bind.connect() as conn:
            return set(MigrationContext.configure(conn).get_current_heads()) == heads
    return set(MigrationContext.configure(bind).get_current_heads()) == heads


@dataclass(frozen=True)
class SchemaState:
    """A store's applied Alembic revisions against this code's heads."""

    location: str
    current: tuple[str, ...]
    heads: tuple[str, ...]
    unknown: tuple[str, ...]  # applied revisions this code has no migration for: a newer evalsvc wrote them

    @property
    def up_to_date(self) -> bool:
        return set(self.current) == set(self.heads)


def schema_state(db: str | None = None) -> SchemaState:
    """The schema revision of the existing store at `db`, read without making or migrating anything.

    Raises NoStore when there is no store there, StoreError when it cannot be read or is not an evalsvc store.
    """
    from alembic.runtime.migration import MigrationContext

    store = open_store(db, migrate=False, create=False)
    try:
        with _store_errors(store.url), store.engine.connect() as conn:
            current = tuple(sorted(MigrationContext.configure(conn).get_current_heads()))
    finally:
        store.dispose()
    script = _scripts()
    known = {rev.revision for rev in script.walk_revisions()}
    return SchemaState(location=store_location(store.url), current=current,
                       heads=tuple(sorted(script.get_heads())), unknown=tuple(r for r in current if r not in known))


def _lock_for_migration(conn: Connection) -> None:
    if conn.dialect.name == "sqlite":
        # pysqlite opens transactions lazily; take the write lock before reading the revision.
        conn.exec_driver_sql("BEGIN IMMEDIATE")
    elif conn.dialect.name == "postgresql":
        conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK_KEY})")


def store_location(url: str) -> str:
    """Where a store is, for people: a SQLite store's file path, else the URL without its password."""
    return _sqlite_parts(url)[0] if url.startswith("sqlite") else mask_url(url)


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else ""

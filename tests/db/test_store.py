"""The store on SQLite and PostgreSQL: migrations, constraints, round trips, hostile text."""

from __future__ import annotations

import ast
import importlib
import json
import os
import pkgutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pandas as pd
import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Connection, create_engine, insert, inspect, select, text
from sqlalchemy.exc import IntegrityError

from db import queries
from db.engine import Store, open_store
from db.models import Base, Item, Run
from harness.types import Completion, ItemResult, Request, Sample

VERSIONS = Path(__file__).resolve().parents[2] / "db" / "migrations" / "versions"
SQL_NAMES = [
    "step'; DROP TABLE items; --",
    'robert"); DELETE FROM runs WHERE (1=1',
    "%s %(name)s :param ? $1 \\x00 \\' --",
]
RUN_FIELDS = {"task": "gsm8k", "template": "t@v1", "mode": "chat", "decoding": {"temperature": 0.0},
              "config_hash": "c" * 16, "dataset_hash": "d" * 16, "n_items": 3}


def make_run(store: Store, endpoint: str = "step1") -> int:
    with store.session() as session:
        ep = queries.upsert_endpoint(session, endpoint, "http://127.0.0.1:1/v1", "m", {"models": ["m"]}, {})
        run, _ = queries.open_run(session, ep, dict(RUN_FIELDS), new_repeat=False)
        session.commit()
        return run.id


def sample(item_id: str = "gsm8k/test/0000", prompt: str = "What is 2+2?", reference: str = "4") -> Sample:
    return Sample(task="gsm8k", item_id=item_id, item_hash="h" * 16, prompt=prompt, reference=reference)


def save(store: Store, run_id: int, s: Sample, completion: Completion, result: ItemResult | None) -> None:
    request = Request(mode="chat", messages=({"role": "user", "content": s.prompt},))
    with store.session() as session:
        queries.save_items(session, run_id, [queries.item_values(run_id, s, request, completion, result)])


def latest_revision() -> str:
    """The revision no other migration file names as its parent, read from the files themselves."""
    revisions, parents = set(), set()
    for path in VERSIONS.glob("*.py"):
        source = path.read_text()
        revisions.add(source.split("\nrevision = ")[1].split("\n")[0].strip("'\""))
        parents.add(source.split("\ndown_revision = ")[1].split("\n")[0].strip("'\""))
    (head,) = revisions - parents
    return head


def all_models() -> set[str]:
    """Every table some db module declares (importing each registers it on Base.metadata)."""
    import db

    for module in pkgutil.iter_modules(db.__path__):
        importlib.import_module(f"db.{module.name}")
    return set(Base.metadata.tables)


def test_every_table_is_declared_in_models_py() -> None:
    """One place to read the schema: no other db module declares a mapped class."""
    db_dir = VERSIONS.parents[1]
    elsewhere = [
        f"{path.name}: {node.name}"
        for path in sorted(db_dir.glob("*.py")) if path.name != "models.py"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef) and any(ast.unparse(base) in ("Base", "DeclarativeBase") for base in node.bases)
    ]
    assert elsewhere == []
    assert {"speed_runs", "speed_samples", "endpoints", "runs", "items"} <= set(Base.metadata.tables)


def test_importing_the_store_does_not_load_the_http_client() -> None:
    """The store needs the shared records only (`harness.types`), never the client that fetches them."""
    import db

    modules = ", ".join(f"db.{m.name}" for m in pkgutil.iter_modules(db.__path__))
    code = f"import sys, {modules}; print(sorted(m for m in sys.modules if m.split('.')[0] == 'httpx'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=VERSIONS.parents[2], env={**os.environ, "PYTHONPATH": str(VERSIONS.parents[2])})
    assert "db.queries" in modules
    assert out.stdout.strip() == "[]"


def test_migrations_build_exactly_the_models_on_an_empty_store(wiped_url: str) -> None:
    store = open_store(wiped_url)
    models = all_models()
    with store.engine.connect() as conn:
        tables = set(inspect(conn).get_table_names())
        version = conn.execute(text("select version_num from alembic_version")).scalars().all()
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    store.dispose()
    assert models >= {"endpoints", "runs", "items"}
    assert tables == models | {"alembic_version"}
    assert version == [latest_revision()]
    assert diff == [], f"migrations and db/models.py disagree: {diff}"


def test_reopening_a_migrated_store_changes_nothing(store: Store) -> None:
    run_id = make_run(store)
    again = open_store(store.url)
    with again.session() as session:
        assert [r.id for r in session.scalars(select(Run))] == [run_id]
        assert session.execute(text("select count(*) from alembic_version")).scalar_one() == 1
    again.dispose()


def test_sqlite_store_is_in_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "wal.db"
    open_store(str(path)).dispose()
    with sqlite3.connect(path) as conn:
        assert conn.execute("pragma journal_mode").fetchone()[0] == "wal"


def test_a_second_row_for_the_same_item_is_refused_by_the_database(store: Store) -> None:
    run_id = make_run(store)
    row = {"run_id": run_id, "item_id": "gsm8k/test/0007", "item_hash": "h", "status": "ok", "reference": "1",
           "request": "", "completion": "", "truncated": False, "latency_s": 0.0, "attempts": 1, "detail": {},
           "created_at": queries.utcnow()}
    with store.engine.begin() as conn:
        conn.execute(insert(Item), row)
    with pytest.raises(IntegrityError):
        with store.engine.begin() as conn:
            conn.execute(insert(Item), {**row, "status": "error", "completion": "second"})
    with store.engine.connect() as conn:
        assert conn.execute(text("select count(*) from items")).scalar_one() == 1


def test_a_second_run_with_the_same_identity_and_repeat_is_refused(store: Store) -> None:
    run_id = make_run(store)
    with store.engine.connect() as conn:
        endpoint_id = conn.execute(select(Run.endpoint_id).where(Run.id == run_id)).scalar_one()
    with pytest.raises(IntegrityError):
        with store.engine.begin() as conn:
            conn.execute(insert(Run), {**RUN_FIELDS, "endpoint_id": endpoint_id, "repeat": 0, "status": "running",
                                       "started_at": queries.utcnow()})


@pytest.mark.parametrize("spelling", ["http://127.0.0.1:7/", "http://127.0.0.1:7/v1/", "http://127.0.0.1:7"])
def test_every_spelling_of_an_endpoint_url_is_stored_as_one(store: Store, spelling: str) -> None:
    """Whoever stores the endpoint (a run, a speed measurement), one server has one stored URL and no false move."""
    with store.session() as session:
        queries.upsert_endpoint(session, "step", "http://127.0.0.1:7/v1", "m", {}, {})
        session.commit()
        again = queries.upsert_endpoint(session, "step", spelling, "m", {}, {})
        session.commit()
        assert (again.base_url, "earlier_urls" in again.metadata_) == ("http://127.0.0.1:7/v1", False)
        with pytest.raises(queries.EndpointConflict, match="use a new --endpoint name"):
            queries.upsert_endpoint(session, "step", "http://127.0.0.1:8", "m", {}, {})


def test_an_endpoint_stored_with_its_url_spelt_otherwise_is_the_same_endpoint(store: Store) -> None:
    with store.session() as session:
        queries.upsert_endpoint(session, "old", "http://127.0.0.1:7/v1", "m", {}, {})
        session.commit()
        session.execute(text("update endpoints set base_url = 'http://127.0.0.1:7' where name = 'old'"))
        session.commit()
        endpoint = queries.upsert_endpoint(session, "old", "http://127.0.0.1:7/", "m", {}, {})
        assert (endpoint.base_url, "earlier_urls" in endpoint.metadata_) == ("http://127.0.0.1:7/v1", False)


def test_item_round_trips_through_save_items(store: Store) -> None:
    run_id = make_run(store)
    completion = Completion(text="Steps. The answer is 4.", reasoning_text="think", prompt_tokens=11,
                            completion_tokens=17, reasoning_tokens=5, finish_reason="length", latency_s=0.25,
                            attempts=2)
    result = ItemResult(passed=True, extracted="4", extracted_strict="4", extracted_flexible="4",
                        detail={"extraction": "strict"})
    save(store, run_id, sample(), completion, result)
    with store.session() as session:
        (item,) = queries.get_items(session, run_id)
        frame = queries.items_frame(session, run_id)
        (summary,) = queries.summarize_runs(session, [run_id])
    assert (item.status, item.correct, item.extracted, item.reference) == ("ok", True, "4", "4")
    assert (item.completion, item.reasoning) == ("Steps. The answer is 4.", "think")
    assert (item.prompt_tokens, item.completion_tokens, item.reasoning_tokens) == (11, 17, 5)
    assert (item.finish_reason, item.truncated, item.attempts, item.latency_s) == ("length", True, 2, 0.25)
    assert item.detail == {"extraction": "strict"} and '"What is 2+2?"' in item.request
    assert frame[["item_id", "correct", "completion_tokens"]].values.tolist() == [["gsm8k/test/0000", True, 17]]
    assert (summary.n, summary.correct, summary.errors, summary.truncated) == (1, 1, 0, 1)


def test_error_row_is_replaced_by_a_later_success_and_never_duplicated(store: Store) -> None:
    run_id = make_run(store)
    save(store, run_id, sample(), Completion(error="POST x: HTTP 503", attempts=4), None)
    with store.session() as session:
        assert queries.done_item_ids(session, run_id) == set()
        (summary,) = queries.summarize_runs(session, [run_id])
    assert (summary.n, summary.errors, summary.correct, summary.accuracy) == (1, 1, 0, None)
    save(store, run_id, sample(), Completion(text="The answer is 5."), ItemResult(passed=False, extracted="5"))
    save(store, run_id, sample(), Completion(text="late duplicate"), ItemResult(passed=True, extracted="4"))
    with store.session() as session:
        items = queries.get_items(session, run_id)
    assert [(i.status, i.correct, i.completion) for i in items] == [("ok", False, "The answer is 5.")]


def test_items_of_several_runs_in_one_read_match_one_run_at_a_time(store: Store) -> None:
    runs = [make_run(store, endpoint=name) for name in ("step1", "step2", "step3")]
    for run_id, count in zip(runs, (3, 0, 2)):
        for i in range(count):
            save(store, run_id, sample(item_id=f"gsm8k/test/{i:04d}"), Completion(text=f"{run_id}", completion_tokens=i),
                 ItemResult(passed=i % 2 == 0, extracted=str(i)))
    with store.session() as session:
        frames = queries.items_frames(session, runs)
        narrow = queries.items_frames(session, runs, ("status", "item_id", "completion_tokens"))
        singles = {run_id: queries.items_frame(session, run_id) for run_id in runs}
        with pytest.raises(ValueError, match="not item columns: prompt"):
            queries.items_frames(session, runs, ("item_id", "prompt"))
    assert sorted(frames) == sorted(narrow) == [runs[0], runs[2]]  # a run without items is left out
    for run_id, frame in frames.items():
        pd.testing.assert_frame_equal(frame, singles[run_id])
        assert list(narrow[run_id].columns) == ["run_id", "item_id", "status", "completion_tokens"]
        pd.testing.assert_frame_equal(narrow[run_id], singles[run_id][list(narrow[run_id].columns)])
    assert singles[runs[1]].empty and tuple(singles[runs[1]].columns) == queries.ITEM_COLUMNS


def test_one_batch_stores_new_items_replaces_error_rows_and_keeps_ok_rows(store: Store) -> None:
    run_id = make_run(store)
    errored, done, new = (sample(item_id=f"gsm8k/test/000{i}") for i in range(3))
    save(store, run_id, errored, Completion(error="POST x: HTTP 503", attempts=4), None)
    save(store, run_id, done, Completion(text="The answer is 4."), ItemResult(passed=True, extracted="4"))
    request = Request(mode="chat", messages=({"role": "user", "content": "What is 2+2?"},))
    batch = [queries.item_values(run_id, s, request, Completion(text=f"again {s.item_id}"),
                                 ItemResult(passed=False, extracted="5")) for s in (errored, done, new)]
    with store.engine.connect() as conn:
        queries.save_items(conn, run_id, batch)
    with store.session() as session:
        items = queries.get_items(session, run_id)
    assert [(i.item_id, i.status, i.completion) for i in items] == [
        ("gsm8k/test/0000", "ok", "again gsm8k/test/0000"),
        ("gsm8k/test/0001", "ok", "The answer is 4."),
        ("gsm8k/test/0002", "ok", "again gsm8k/test/0002"),
    ]


@pytest.mark.parametrize("name", SQL_NAMES)
def test_sql_looking_strings_are_stored_verbatim(store: Store, name: str) -> None:
    run_id = make_run(store, endpoint=name)
    save(store, run_id, sample(item_id=name[:100], prompt=name, reference=name),
         Completion(text=name), ItemResult(passed=False, extracted=name))
    with store.session() as session:
        (item,) = queries.get_items(session, run_id)
        (summary,) = queries.summarize_runs(session)
        endpoint = queries.get_endpoint(session, name)
        run = queries.resolve_run(session, str(run_id))
    assert (item.item_id, item.reference, item.completion, item.extracted) == (name[:100], name, name, name)
    assert summary.endpoint == name and endpoint.name == name and run.id == run_id
    with store.engine.connect() as conn:
        assert set(inspect(conn).get_table_names()) >= {"endpoints", "runs", "items"}
        assert conn.execute(text("select count(*) from runs")).scalar_one() == 1


def test_lone_surrogates_and_nul_are_marked_not_fatal(store: Store) -> None:
    run_id = make_run(store)
    hostile = "bad \ud800 half, nul \x00 here, pair \ud83d\ude00, ok é"
    save(store, run_id, sample(prompt=hostile), Completion(text=hostile, reasoning_text=hostile),
         ItemResult(passed=False))
    with store.session() as session:
        (item,) = queries.get_items(session, run_id)
    marked = "bad \ufffd half, nul \ufffd here, pair \U0001F600, ok é"
    assert item.completion == marked and item.reasoning == marked
    # Inside the request JSON a NUL is an escape sequence, so only the surrogate needs marking.
    assert json.loads(item.request)["messages"][0]["content"] == marked.replace("nul \ufffd", "nul \x00")


@contextmanager
def store_at(url: str, revision: str) -> Iterator[Connection]:
    """A SQLite store migrated only up to `revision`, holding endpoint 1, to test what later migrations do."""
    from alembic import command

    from db.engine import _alembic_config

    engine = create_engine(url)
    cfg = _alembic_config()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)
        conn.execute(text("insert into endpoints (id, name, base_url, model, fingerprint, metadata, created_at) "
                          "values (1, 'e', 'u', 'm', '{}', '{}', '2026-01-01')"))
        yield conn
    engine.dispose()


def test_isolation_migration_backfills_humaneval_runs_from_their_items(tmp_path: Path) -> None:
    """Runs stored before runs.isolation existed get what their items recorded; runs that ran no code stay NULL."""
    url = f"sqlite:///{tmp_path / 'old.db'}"
    with store_at(url, "0004") as conn:
        for run_id, task, isolations in ((1, "humaneval", ["process", "process"]), (2, "humaneval", ["bwrap", "process"]),
                                         (3, "gsm8k", [None]), (4, "humaneval", [])):
            conn.execute(text("insert into runs (id, endpoint_id, task, template, mode, decoding, config_hash, "
                              "dataset_hash, n_items, repeat, status, started_at) values (:id, 1, :task, 't', 'chat', "
                              "'{}', :id, 'd', 2, 0, 'complete', '2026-01-01')"), {"id": run_id, "task": task})
            for n, isolation in enumerate(isolations):
                detail = json.dumps({"outcome": "passed", "isolation": isolation} if isolation else {})
                conn.execute(text("insert into items (run_id, item_id, item_hash, status, reference, request, "
                                  "completion, truncated, latency_s, attempts, detail, created_at) values "
                                  "(:run, :item, 'h', 'ok', '', '', '', 0, 0, 1, :detail, '2026-01-01')"),
                             {"run": run_id, "item": f"i{n}", "detail": detail})
    store = open_store(url)
    with store.session() as session:
        found = dict(session.execute(select(Run.id, Run.isolation).order_by(Run.id)).all())
    store.dispose()
    assert found == {1: "process", 2: "mixed", 3: None, 4: None}


def test_response_issue_migration_makes_impossible_stored_counts_unknown(tmp_path: Path) -> None:
    """Counts stored before responses were checked: negative or beyond INTEGER become NULL with the reason."""
    url = f"sqlite:///{tmp_path / 'old.db'}"
    with store_at(url, "0003") as conn:
        conn.execute(text("insert into runs (id, endpoint_id, task, template, mode, decoding, config_hash, "
                          "dataset_hash, n_items, repeat, status, started_at) values (1, 1, 'gsm8k', 't', 'chat', "
                          "'{}', 'c', 'd', 3, 0, 'complete', '2026-01-01')"))
        for n, (prompt, completion) in enumerate(((20, 17), (20, -7), (2**62, 2**40))):
            conn.execute(text("insert into items (run_id, item_id, item_hash, status, reference, request, "
                              "completion, truncated, latency_s, attempts, detail, created_at, prompt_tokens, "
                              "completion_tokens) values (1, :item, 'h', 'ok', '', '', '', 0, 0, 1, '{}', "
                              "'2026-01-01', :prompt, :completion)"),
                         {"item": f"i{n}", "prompt": prompt, "completion": completion})
    store = open_store(url)
    with store.session() as session:
        found = session.execute(select(Item.prompt_tokens, Item.completion_tokens, Item.response_issue)
                                .order_by(Item.item_id)).all()
        (summary,) = queries.summarize_runs(session, [1])
    store.dispose()
    assert [tuple(row) for row in found] == [
        (20, 17, None),
        (20, None, "completion_tokens stored before checks was impossible"),
        (None, None, "completion_tokens stored before checks was impossible"),
    ]
    assert (summary.unknown_tokens, summary.mean_completion_tokens) == (2, 17.0)


def test_the_default_store_and_the_dashboard_jobs_live_in_one_data_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from db.engine import DB_ENV, DEFAULT_DB_SHOWN, data_dir, default_db_url

    monkeypatch.delenv(DB_ENV, raising=False)
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_db_url() == f"sqlite:///{Path(DEFAULT_DB_SHOWN).expanduser()}"  # what --help says is true
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert (data_dir(), default_db_url()) == (tmp_path / "xdg" / "evalsvc", f"sqlite:///{tmp_path / 'xdg/evalsvc/evalsvc.db'}")

"""Stores are opened, not conjured: readers refuse a missing store, writers make one only where told,
and a database that is not an evalsvc store is never altered."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest

from tests.conftest import GSM8K_TEST, run_cli
from tests.fake_openai import FakeOpenAI

READERS = [
    ["runs"], ["show", "step3"], ["compare", "a", "b"], ["report", "--endpoints", "a,b"], ["decide", "a", "b"],
    ["dashboard"], ["export", "1"],
]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def one_line_error(result, code: int = 2) -> str:  # type: ignore[no-untyped-def]
    assert result.exit_code == code and result.stdout == "", result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


@pytest.mark.parametrize("command", READERS, ids=lambda c: c[0])
def test_readers_refuse_a_missing_store_and_make_nothing(tmp_path: Path, command: list[str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.delenv("EVALSVC_DB", raising=False)
    typo = tmp_path / "sub" / "evalsvc.db"
    line = one_line_error(run_cli(*command, "--db", str(typo)))
    default = tmp_path / "data" / "evalsvc" / "evalsvc.db"
    assert f"no evalsvc store at {typo}" in line and f"the default store is {default}" in line
    line = one_line_error(run_cli(*command))  # the default store does not exist either
    assert f"no evalsvc store at {default}" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize(("given", "suggested"), [
    ("sqlite:{tmp}/x.db", "write --db sqlite:///{tmp}/x.db or just --db {tmp}/x.db"),
    ("sqlite://{tmp}/x.db", "for {tmp}/x.db write sqlite:///{tmp}/x.db or just --db {tmp}/x.db"),
    ("sqlite://", "in-memory SQLite database, which keeps nothing"),
])
def test_misspelt_sqlite_urls_are_refused_with_the_right_spelling(tmp_path: Path, given: str, suggested: str,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # sqlite:///tmp/x.db is SQLAlchemy's spelling of the *relative* path tmp/x.db; it must not become one.
    monkeypatch.chdir(tmp_path)
    url = given.format(tmp=tmp_path)
    for command in (["runs"], ["run", "--endpoint", "e", "--url", "http://127.0.0.1:9/v1", "--model", "m"]):
        line = one_line_error(run_cli(*command, "--db", url))
        assert suggested.format(tmp=tmp_path) in line
    assert list(tmp_path.iterdir()) == []


def test_a_foreign_sqlite_file_is_never_altered(tmp_path: Path) -> None:
    other = tmp_path / "notes.db"
    with sqlite3.connect(other) as conn:
        conn.execute("create table notes (body text)")
        conn.execute("insert into notes values ('keep me')")
    before = digest(other)
    with FakeOpenAI() as server:
        for command in (["runs"], ["run", "--endpoint", "e", "--url", server.base_url, "--model", "fake-model",
                                   "--data", GSM8K_TEST, "--limit", "2"]):
            line = one_line_error(run_cli(*command, "--db", str(other)))
            assert f"{other} is not an evalsvc store (it holds the tables notes)" in line
        assert server.requests == []
    assert digest(other) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.db"]  # no -wal or -shm: not even opened for writing


def test_a_file_that_is_not_sqlite_is_refused(tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database at all" * 100)
    line = one_line_error(run_cli("runs", "--db", str(junk)))
    assert f"{junk} is not an SQLite database" in line
    assert junk.read_bytes() == b"not a database at all" * 100


def test_run_makes_a_store_only_where_told_and_says_so_once(tmp_path: Path) -> None:
    missing_folder = tmp_path / "nope" / "evalsvc.db"
    with FakeOpenAI() as server:
        args = ["run", "--endpoint", "e", "--url", server.base_url, "--model", "fake-model", "--data", GSM8K_TEST,
                "--limit", "2", "--no-progress"]
        line = one_line_error(run_cli(*args, "--db", str(missing_folder)))
        assert f"folder {missing_folder.parent} does not exist" in line
        assert not missing_folder.parent.exists()
        db = tmp_path / "evalsvc.db"
        first = run_cli(*args, "--db", str(db))
        assert first.exit_code == 0, first.output
        assert first.stderr.splitlines() == [f"created a new evalsvc store at {db}"]
        again = run_cli(*args, "--repeat", "--db", str(db))
    assert again.exit_code == 0 and again.stderr == ""
    assert run_cli("runs", "--db", str(db)).stdout.count("\n") == 3  # header and two runs


def test_a_run_that_fails_before_writing_leaves_no_store(tmp_path: Path) -> None:
    db = tmp_path / "evalsvc.db"
    line = one_line_error(run_cli("run", "--endpoint", "e", "--url", "http://127.0.0.1:9/v1", "--model", "m",
                                  "--data", GSM8K_TEST, "--db", str(db)), code=3)
    assert "is unreachable" in line and not db.exists()

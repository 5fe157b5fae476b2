"""One row the store refuses becomes that item's error row; the rest of its batch is stored (issue 13)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from db import queries
from db.engine import Store
from evalsvc.run.runner import ItemWriter
from harness.types import Completion, ItemResult, Request
from tests.db.conftest import store, store_url  # noqa: F401 - fixtures: every case on SQLite and PostgreSQL
from tests.db.test_store import make_run, sample

REQUEST = Request(mode="chat", messages=({"role": "user", "content": "What is 2+2?"},))


def row(run_id: int, index: int, **overrides: Any) -> dict[str, Any]:
    values = queries.item_values(run_id, sample(item_id=f"gsm8k/test/{index:04d}"), REQUEST,
                                 Completion(text="The answer is 4.", completion_tokens=10 + index),
                                 ItemResult(passed=True, extracted="4"))
    return {**values, **overrides}


async def write_batch(store: Store, run_id: int, rows: list[dict[str, Any]]) -> list[BaseException | None]:
    """Queue every row before the writer runs, so they go in one batch; each save's outcome."""
    with store.engine.connect() as conn:
        writer = ItemWriter(conn, run_id)
        saves = [asyncio.ensure_future(writer.save(r)) for r in rows]
        await asyncio.sleep(0)
        writing = asyncio.ensure_future(writer.run())
        outcomes = await asyncio.gather(*saves, return_exceptions=True)
        writing.cancel()
    return list(outcomes)


def test_an_unstorable_row_becomes_an_error_row_and_its_batch_is_kept(store: Store) -> None:
    run_id = make_run(store)
    rows = [row(run_id, 0), row(run_id, 1, completion_tokens=2**70), row(run_id, 2),
            row(run_id, 3, detail={"unserialisable": object()}), row(run_id, 4)]
    outcomes = asyncio.run(write_batch(store, run_id, rows))
    with store.session() as session:
        items = {i.item_id[-1]: i for i in queries.get_items(session, run_id)}
    assert outcomes == [None] * 5
    assert [(k, i.status, i.completion_tokens) for k, i in sorted(items.items())] == [
        ("0", "ok", 10), ("1", "error", None), ("2", "ok", 12), ("3", "error", None), ("4", "ok", 14)]
    assert items["1"].error.startswith("could not store the item: ") and items["1"].completion == ""
    assert "TypeError" in items["3"].error and items["3"].detail == {}
    with store.session() as session:
        assert queries.done_item_ids(session, run_id) == {f"gsm8k/test/000{k}" for k in (0, 2, 4)}


def test_when_the_store_itself_fails_every_waiting_item_fails(store: Store) -> None:
    run_id = make_run(store)

    async def write_on_a_closed_connection() -> list[BaseException | None]:
        with store.engine.connect() as conn:
            writer = ItemWriter(conn, run_id)
            saves = [asyncio.ensure_future(writer.save(row(run_id, k))) for k in range(3)]
            await asyncio.sleep(0)
            conn.close()  # the store is gone: not even an error row can be written
            writing = asyncio.ensure_future(writer.run())
            outcomes = await asyncio.gather(*saves, return_exceptions=True)
            writing.cancel()
        return list(outcomes)

    outcomes = asyncio.run(write_on_a_closed_connection())
    assert len(outcomes) == 3 and all(isinstance(o, Exception) for o in outcomes)
    with store.session() as session:
        assert queries.get_items(session, run_id) == []

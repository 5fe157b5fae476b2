"""Stop signals cancel a run from inside its event loop, never from the middle of the loop's own code."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from evalsvc.run.interrupts import run_until_stopped, stop_signals_as_interrupt


async def _signal_self_then_wait(sig: signal.Signals, seen: dict[str, int]) -> None:
    os.kill(os.getpid(), sig)
    # Python runs the signal's handler at the next bytecode after os.kill returns: inside this synchronous
    # stretch, as inside any code the loop runs. The task must not be cancelled here, only at an await.
    for _ in range(1000):
        pass
    task = asyncio.current_task()
    assert task is not None
    seen["cancelling"] = task.cancelling()
    await asyncio.sleep(30)
    seen["slept"] = 1


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_stop_signal_cancels_the_run_at_an_await_not_inside_running_code(sig: signal.Signals) -> None:
    seen: dict[str, int] = {}
    with stop_signals_as_interrupt() as stop_signal, pytest.raises(KeyboardInterrupt):
        run_until_stopped(_signal_self_then_wait(sig, seen))
    assert seen == {"cancelling": 0}
    assert stop_signal() == sig
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_plain_asyncio_run_cancels_inside_running_code() -> None:
    """The check above can fail: asyncio.run's own Ctrl-C handler cancels at once, mid-code."""
    seen: dict[str, int] = {}
    with pytest.raises(KeyboardInterrupt):
        asyncio.run(_signal_self_then_wait(signal.SIGINT, seen))
    assert seen == {"cancelling": 1}


def test_sigterm_stops_the_run_while_ctrl_c_is_ignored() -> None:
    """A command started with Ctrl-C ignored (a background job of a script) still stops on SIGTERM, at an
    await, and Ctrl-C stays ignored."""
    seen: dict[str, int] = {}
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with stop_signals_as_interrupt() as stop_signal, pytest.raises(KeyboardInterrupt):
            run_until_stopped(_signal_self_then_wait(signal.SIGTERM, seen))
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)
    assert seen == {"cancelling": 0}
    assert stop_signal() == signal.SIGTERM


def test_a_run_that_ends_returns_its_value_and_a_cancel_of_its_own_stays_a_cancel() -> None:
    async def answer() -> int:
        await asyncio.sleep(0)
        return 42

    async def cancelled() -> None:
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        await asyncio.sleep(1)

    assert run_until_stopped(answer()) == 42
    with pytest.raises(asyncio.CancelledError):
        run_until_stopped(cancelled())
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_signal_as_the_run_ends_still_stops_the_command() -> None:
    """The signal comes in the run's last synchronous stretch: the loop's cancel finds the run done, and the
    command stops all the same (asyncio.run's handler raises at once in that case)."""
    async def signal_self_and_end() -> int:
        os.kill(os.getpid(), signal.SIGTERM)
        return 42

    with stop_signals_as_interrupt() as stop_signal, pytest.raises(KeyboardInterrupt):
        run_until_stopped(signal_self_and_end())
    assert stop_signal() == signal.SIGTERM

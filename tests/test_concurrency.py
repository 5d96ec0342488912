"""Process-wide settings and the request budget stay right when threads and tasks overlap: overlapping
`set_config` blocks never leave a change behind, and one budget bounds every request whatever the settings
were when each was sent. The interleavings are forced with events, never with sleeps."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from xarray_zarrmax import get_config, set_config

# -- set_config -------------------------------------------------------------------------------------------------


def run_threads(*steps: Callable[[], None]) -> None:
    threads = [threading.Thread(target=step) for step in steps]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads), "a thread is stuck: an event was never set"


def overlap(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """Thread A enters a block with ``first``, thread B one with ``second``; A exits, then B: the order that a
    save-and-restore set_config gets wrong. Returns the settings each thread saw at each step."""
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    seen: dict[str, Any] = {}

    def thread_a() -> None:
        with set_config(**first):
            a_in.set()
            assert b_in.wait(10)
        seen["after A exits"] = get_config()
        a_out.set()

    def thread_b() -> None:
        assert a_in.wait(10)
        with set_config(**second):
            b_in.set()
            assert a_out.wait(10)
            seen["B still in"] = get_config()

    run_threads(thread_a, thread_b)
    seen["after both"] = get_config()
    return seen


def test_overlapping_blocks_in_two_threads_leave_nothing_behind():
    before = get_config()
    seen = overlap({"concurrency": 7}, {"concurrency": 9})
    assert seen["after A exits"].concurrency == 9  # B's block is still open: its setting stays in force
    assert seen["B still in"].concurrency == 9
    assert seen["after both"] == before


def test_an_exit_withdraws_only_its_own_changes():
    before = get_config()
    seen = overlap({"retries": 5}, {"split_size": 2**10})
    assert seen["after A exits"].retries == before.retries  # A's change is gone...
    assert seen["after A exits"].split_size == 2**10  # ...and B's, made after A's, is kept
    assert seen["after both"] == before


def test_a_later_block_wins_a_setting_both_change_until_it_exits():
    before = get_config()
    outer = set_config(concurrency=7, retries=1)
    inner = set_config(concurrency=9)
    outer.__enter__()
    inner.__enter__()
    assert (get_config().concurrency, get_config().retries) == (9, 1)
    inner.__exit__(None, None, None)
    assert (get_config().concurrency, get_config().retries) == (7, 1)
    outer.__exit__(None, None, None)
    assert get_config() == before


def test_a_block_in_the_main_thread_is_seen_by_other_threads():
    seen = []
    with set_config(threads=3):
        run_threads(lambda: seen.append(get_config().threads))
    assert seen == [3]


def test_an_invalid_change_changes_nothing():
    before = get_config()
    with pytest.raises(ValueError, match=r"config concurrency must be an integer >= 1. Got 0 instead"):
        with set_config(concurrency=0):
            pass
    with pytest.raises(TypeError, match="unexpected keyword argument 'no_such_setting'"):
        with set_config(no_such_setting=1):
            pass
    assert get_config() == before

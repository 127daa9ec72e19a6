"""The shared request driver's ways to stop (bench/loadgen.py)."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from bench.loadgen import RequestRecord, drive, drive_sessions


def _sender(sent: list[int]):
    async def send(i: int, record: RequestRecord) -> None:
        sent.append(i)
        record.ok = True
        await asyncio.sleep(0)

    return send


def test_a_count_sends_each_request_once() -> None:
    sent: list[int] = []
    result = asyncio.run(drive(_sender(sent), 4, requests=10))
    assert sorted(sent) == list(range(10)) and len(result.records) == 10


def test_a_condition_stops_new_requests_and_lets_the_started_ones_end() -> None:
    sent: list[int] = []
    result = asyncio.run(drive(_sender(sent), 3, until=lambda: len(sent) >= 7))
    assert 7 <= len(sent) <= 7 + 3 and len(result.records) == len(sent)
    assert all(record.ok for record in result.records)


def test_without_a_way_to_stop_it_refuses() -> None:
    with pytest.raises(ValueError):
        asyncio.run(drive(_sender([]), 1))


def test_sessions_send_their_turns_in_order_one_after_another_and_each_session_once() -> None:
    sent: list[tuple[str, int]] = []
    open_turns: dict[str, int] = {}

    async def send(session: str, turn: int, record: RequestRecord) -> None:
        assert session not in open_turns, "a session's next turn started before its last one ended"
        open_turns[session] = turn
        await asyncio.sleep(0)
        del open_turns[session]
        sent.append((session, turn))
        record.ok = True

    sessions = {"a": 3, "b": 1, "c": 4, "d": 2}
    result = asyncio.run(drive_sessions(send, 2, list(sessions), sessions.__getitem__))
    assert len(result.records) == sum(sessions.values()) == len(sent)
    for name, turns in sessions.items():
        assert [t for s, t in sent if s == name] == list(range(turns))
    assert result.peak_in_flight == 2


def test_sessions_stop_on_a_condition_and_a_failed_turn_is_recorded_not_fatal() -> None:
    sent: list[int] = []

    async def send(session: int, turn: int, record: RequestRecord) -> None:
        sent.append(session)
        if turn == 1:
            raise RuntimeError("connection refused")
        record.ok = True

    result = asyncio.run(drive_sessions(send, 2, itertools.count(), lambda s: 3, until=lambda: len(sent) >= 9))
    assert 9 <= len(result.records) <= 11
    failed = [r for r in result.records if not r.ok]
    assert failed and all(r.error == "RuntimeError: connection refused" for r in failed)

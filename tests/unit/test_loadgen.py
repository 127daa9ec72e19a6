"""The shared request driver's ways to stop (bench/loadgen.py)."""

from __future__ import annotations

import asyncio

import pytest

from bench.loadgen import RequestRecord, drive


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

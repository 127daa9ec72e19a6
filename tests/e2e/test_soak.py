"""The soak in CI (issue 23): about 60 s of load from 32 clients on a stack of its own, with one engine kill and
one Triton restart. `make soak` is the same at 128 clients for 10 minutes."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.soak.outcomes import Outcome
from bench.soak.run import soak_with_stack

# Kills its own stack's engine and Triton; last, so the load does not slow the other tests down.
pytestmark = pytest.mark.disruptive


@pytest.mark.timeout(900)
def test_every_request_completes_or_fails_explicitly_through_two_faults(tmp_path: Path) -> None:
    result = soak_with_stack(tmp_path, seconds=60, clients=32)
    print(result.summary())
    assert len(result.faults) == 5, result.faults  # four fault lines and the RSS trace
    assert result.passed, result.summary()
    seen = {verdict.outcome for verdict in result.verdicts}
    assert {Outcome.COMPLETE, Outcome.ERROR_STATUS, Outcome.CLIENT_DISCONNECT} <= seen, seen

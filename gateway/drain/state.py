"""What a draining gateway knows: whether it drains, and how many generations it still waits for."""

from __future__ import annotations

import asyncio

from gateway.errors import OpenAIError


def shutting_down() -> OpenAIError:
    """The error of a generation refused or cut because the gateway is stopping: retry it elsewhere."""
    return OpenAIError(
        503,
        "The gateway is shutting down; send the request again.",
        type="service_unavailable",
        code="server_shutting_down",
    )


class Drain:
    """Generations in flight in this process, and the drain that waits for them.

    `changed` is set whenever waiting may be over: the last generation ended, or a hurry was asked for.
    """

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.draining = False
        self.hurried = False
        self.in_flight = 0
        self._changed = asyncio.Event()

    def begin(self) -> bool:
        """Starts draining; False when it had started already."""
        if self.draining:
            return False
        self.draining = True
        return True

    def hurry(self) -> None:
        """Ends the wait at once: what is still in flight gets cut."""
        self.hurried = True
        self._changed.set()

    def enter(self) -> None:
        self.in_flight += 1

    def leave(self) -> None:
        self.in_flight -= 1
        if self.in_flight == 0:
            self._changed.set()

    async def wait(self, timeout_s: float, *, hurry_ends_it: bool = True) -> bool:
        """Waits until nothing is in flight (True), or the timeout or, when `hurry_ends_it`, a hurry (False)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self.in_flight and not (hurry_ends_it and self.hurried) and (left := deadline - loop.time()) > 0:
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except TimeoutError:
                break
        return self.in_flight == 0

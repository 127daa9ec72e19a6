"""Readiness of the fleet: a pure verdict over each replica's state.

A model is servable on a replica when that Triton is reachable and ready (not draining), has the model READY,
its engine is healthy and its circuit breaker is closed. With `GATEWAY_REQUIRED_MODELS`, the gateway is ready
while each required model is servable somewhere; without it, while every model that any replica knows is
servable somewhere (so a model unloaded on purpose makes the gateway unready: name the required ones instead).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ReplicaState:
    url: str
    reachable: bool
    server_ready: bool = True
    models: dict[str, str] = field(default_factory=dict)  # name -> Triton's state (READY, UNAVAILABLE, ...)
    unhealthy: frozenset[str] = frozenset()  # models whose engine health gauge is 0
    breakers_open: frozenset[str] = frozenset()

    def state_of(self, model: str) -> str:
        """The model's state on this replica, the first obstacle named."""
        if not self.reachable:
            return "UNREACHABLE"
        if not self.server_ready:
            return "NOT_READY"
        state = self.models.get(model, "ABSENT")
        if state != "READY":
            return state or "UNKNOWN"
        if model in self.unhealthy:
            return "ENGINE_UNHEALTHY"
        if model in self.breakers_open:
            return "CIRCUIT_OPEN"
        return "READY"

    def servable(self, model: str) -> bool:
        return self.state_of(model) == "READY"

    def summary(self) -> str:
        if not self.reachable:
            return "unreachable"
        return "ready" if self.server_ready else "not ready"


@dataclass(frozen=True)
class Verdict:
    ready: bool
    body: dict


# When no replica serves a model, the state reported for it: the most telling obstacle first.
_PRECEDENCE = ("CIRCUIT_OPEN", "ENGINE_UNHEALTHY", "NOT_READY", "UNREACHABLE", "ABSENT")


def fleet_state(model: str, replicas: Sequence[ReplicaState]) -> str:
    states = [r.state_of(model) for r in replicas]
    if "READY" in states:
        return "READY"
    for state in _PRECEDENCE:
        if state in states:
            return state
    return states[0] if states else "ABSENT"


_REASONS = {
    "CIRCUIT_OPEN": "circuit breaker open",
    "ENGINE_UNHEALTHY": "engine unhealthy",
    "UNREACHABLE": "Triton is not reachable",
    "NOT_READY": "Triton is not ready",
}


def verdict(replicas: Sequence[ReplicaState], required: Sequence[str] = ()) -> Verdict:
    known = sorted({name for r in replicas for name in r.models} | set(required))
    models = {name: fleet_state(name, replicas) for name in known}
    body: dict = {"status": "ok", "models": models}
    body["replicas"] = [
        {"url": r.url, "state": r.summary(), "models": {name: r.state_of(name) for name in sorted(r.models)}}
        for r in replicas
    ]
    wanted = list(required) if required else known
    if not any(r.reachable for r in replicas):
        return Verdict(False, {**body, "status": "unavailable", "reason": "Triton is not reachable"})
    if not wanted:
        return Verdict(False, {**body, "status": "unavailable", "reason": "no model is loaded"})
    missing = [name for name in wanted if models[name] != "READY"]
    if not missing:
        return Verdict(True, body)
    by_reason: dict[str, list[str]] = {}
    for name in missing:
        by_reason.setdefault(_REASONS.get(models[name], "model not ready"), []).append(name)
    reason = "; ".join(f"{what}: {', '.join(names)}" for what, names in by_reason.items())
    return Verdict(False, {**body, "status": "unavailable", "reason": reason})

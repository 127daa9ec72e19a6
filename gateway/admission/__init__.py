"""API keys, per-key limits and admission control (issue 23, items 1-3).

Pure cores: `keys` (the key table, digest comparison) and `policy` (admit/queue/refuse, x-ratelimit headers,
shedding). Shells: `auth` (middleware, keys file watcher), `limiter` (memory or Redis counters), `slots` (the
`Admission.slot` seam for routers).
"""

from __future__ import annotations

from gateway.admission.auth import AuthMiddleware, Caller, KeyStore, caller_of
from gateway.admission.limiter import KeyLimiter
from gateway.admission.metrics import AdmissionMetrics
from gateway.admission.slots import Admission, EngineQueues, GlobalSlots, Slot
from gateway.observability.federation import TritonMetricsFederation
from gateway.settings import Settings

__all__ = ["Admission", "AdmissionMetrics", "AuthMiddleware", "Caller", "KeyStore", "Slot", "build_admission", "caller_of"]

# A parallel lease outlives any request (bounded by GATEWAY_REQUEST_TIMEOUT_S) by this much before Redis drops it.
_LEASE_MARGIN_S = 60.0


def build_admission(settings: Settings, metrics: AdmissionMetrics, federation: TritonMetricsFederation) -> Admission:
    engine_queues = None
    if settings.shed_waiting_above is not None:
        engine_queues = EngineQueues(federation, settings.shed_refresh_s)
    return Admission(
        KeyLimiter(settings.redis_url, settings.request_timeout_s + _LEASE_MARGIN_S),
        GlobalSlots(settings.max_in_flight, settings.max_queued, settings.queue_timeout_s, metrics),
        metrics,
        engine_queues,
        settings.shed_waiting_above,
    )

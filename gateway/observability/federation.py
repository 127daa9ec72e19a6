"""Triton's metrics, fetched at scrape time and re-exposed with an `upstream` label.

The Prometheus text is rewritten line by line rather than parsed and printed
again, so names, types, help texts, labels and bucket boundaries stay exactly as
Triton wrote them (a parse-and-print round trip renames counters such as
`nv_inference_count`). A Triton that is down or slow costs one short timeout,
never the scrape.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

FEDERATED_PREFIXES = ("vllm:", "nv_inference_")


@dataclass
class Family:
    """One metric family: its HELP/TYPE lines and its sample lines."""

    name: str
    header: list[str] = field(default_factory=list)
    samples: list[str] = field(default_factory=list)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _label_sample(line: str, label: str) -> str:
    """Adds `label` (already `k="v"`) as the first label of a sample line."""
    name_end = len(line)
    for i, char in enumerate(line):
        if char in "{ \t":
            name_end = i
            break
    if line[name_end : name_end + 1] == "{":
        rest = line[name_end + 1 :]
        separator = "" if rest.lstrip().startswith("}") else ","
        return f"{line[:name_end]}{{{label}{separator}{rest}"
    return f"{line[:name_end]}{{{label}}}{line[name_end:]}"


def parse_families(text: str, upstream: str, prefixes: tuple[str, ...] = FEDERATED_PREFIXES) -> list[Family]:
    """The families of `text` whose names start with `prefixes`, every sample labelled with its upstream."""
    label = f'upstream="{_escape(upstream)}"'
    families: dict[str, Family] = {}
    current: Family | None = None
    for raw in text.splitlines():
        line = raw.rstrip()
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                name = parts[2]
                current = families.setdefault(name, Family(name)) if name.startswith(prefixes) else None
                if current is not None:
                    current.header.append(line)
            continue
        if current is not None and line.startswith(current.name):
            current.samples.append(_label_sample(line, label))
        elif line.startswith(prefixes):
            # A sample outside its family's header block: keep it under its own name.
            name = line.split("{", 1)[0].split(None, 1)[0]
            families.setdefault(name, Family(name)).samples.append(_label_sample(line, label))
    return list(families.values())


def render(per_upstream: list[list[Family]]) -> str:
    """One block per family name across upstreams (the first upstream's HELP/TYPE lines)."""
    merged: dict[str, Family] = {}
    for families in per_upstream:
        for family in families:
            target = merged.setdefault(family.name, Family(family.name, list(family.header)))
            target.samples.extend(family.samples)
    lines = []
    for family in merged.values():
        lines += family.header + family.samples
    return "\n".join(lines) + ("\n" if lines else "")


ENGINE_HEALTH_METRIC = "vllm:engine_healthy"


def unhealthy_engines(families: list[Family]) -> set[str]:
    """Models whose backend reports a failed engine health check (the gauge at 0)."""
    bad = set()
    for family in families:
        if family.name != ENGINE_HEALTH_METRIC:
            continue
        for sample in family.samples:
            labels, _, value = sample.rpartition(" ")
            if float(value) == 0.0 and 'model="' in labels:
                bad.add(labels.split('model="', 1)[1].split('"', 1)[0])
    return bad


@dataclass
class FetchResult:
    upstream: str
    ok: bool
    duration_s: float
    families: list[Family] = field(default_factory=list)


def status_text(results: list[FetchResult]) -> str:
    """The federation's own gauges: whether each fetch worked, and how long it took."""
    lines = [
        "# HELP gateway_federation_up 1 when the last fetch of the upstream's metrics succeeded.",
        "# TYPE gateway_federation_up gauge",
    ]
    lines += [f'gateway_federation_up{{upstream="{_escape(r.upstream)}"}} {1 if r.ok else 0}' for r in results]
    lines += [
        "# HELP gateway_federation_duration_seconds How long the last fetch of the upstream's metrics took.",
        "# TYPE gateway_federation_duration_seconds gauge",
    ]
    lines += [
        f'gateway_federation_duration_seconds{{upstream="{_escape(r.upstream)}"}} {r.duration_s:.6f}' for r in results
    ]
    return "\n".join(lines) + "\n"


class TritonMetricsFederation:
    """Fetches every Triton metrics endpoint concurrently, at scrape time. `urls` is asked each time: the
    replicas found by DNS come and go."""

    def __init__(self, urls: Callable[[], list[str]], timeout_s: float) -> None:
        self._urls = urls
        self._client = httpx.AsyncClient(timeout=timeout_s)

    async def close(self) -> None:
        await self._client.aclose()

    async def _fetch(self, url: str) -> FetchResult:
        started = time.perf_counter()
        try:
            response = await self._client.get(url)
            response.raise_for_status()
            return FetchResult(url, True, time.perf_counter() - started, parse_families(response.text, url))
        except httpx.HTTPError:
            return FetchResult(url, False, time.perf_counter() - started)

    async def fetch_all(self) -> list[FetchResult]:
        return list(await asyncio.gather(*(self._fetch(url) for url in self._urls())))

    async def exposition(self) -> str:
        results = await self.fetch_all()
        return status_text(results) + render([r.families for r in results])

    async def unhealthy_engines(self) -> set[str]:
        return {model for result in await self.fetch_all() for model in unhealthy_engines(result.families)}

"""Reads the engine configuration vLLM logs at start from A's and C's logs and lists where they differ,
so a run shows that both served the same engine rather than assuming it."""

from __future__ import annotations

import re
from pathlib import Path

_LINE = re.compile(r"Initializing a V1 LLM engine \(v[^)]*\) with config: (.*)")
_OPEN, _CLOSE = "([{", ")]}"


def config_line(log_path: Path) -> str | None:
    try:
        text = log_path.read_text(errors="replace")
    except OSError:
        return None
    match = _LINE.search(text)
    return match.group(1).strip() if match else None


def fields(line: str) -> dict[str, str]:
    """`a=1, b={'x': 1, 'y': 2}` -> {"a": "1", "b": "{'x': 1, 'y': 2}"}: splits on top-level commas only."""
    found: dict[str, str] = {}
    depth, start = 0, 0
    for i, char in enumerate(line + ","):
        if char in _OPEN:
            depth += 1
        elif char in _CLOSE:
            depth -= 1
        elif char == "," and depth == 0:
            key, _, value = line[start:i].strip().partition("=")
            if key:
                found[key] = value
            start = i + 1
    return found


def differences(a_log: Path, c_log: Path) -> dict[str, object]:
    """{"A": line, "C": line, "differ": {field: [A value, C value]}}; lines are None when not found."""
    a, c = config_line(a_log), config_line(c_log)
    result: dict[str, object] = {"A": a, "C": c, "differ": None}
    if a and c:
        fa, fc = fields(a), fields(c)
        result["differ"] = {k: [fa.get(k), fc.get(k)] for k in sorted(fa.keys() | fc.keys()) if fa.get(k) != fc.get(k)}
    return result

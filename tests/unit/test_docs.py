"""The documentation agrees with the code: the settings table of docs/configuration.md is what
gateway/settings.py gives, every backend parameter has its row, the links resolve, and the front pages keep
their size."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gateway import settings_doc
from gateway.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
CONFIGURATION = ROOT / "docs" / "configuration.md"
REGENERATE = "run `python -m gateway.settings_doc` to regenerate docs/configuration.md"
LINKED_PAGES = [
    ROOT / "README.md",
    ROOT / "bench" / "README.md",
    ROOT / "backend" / "README.md",
    ROOT / "deploy" / "helm" / "triton-vllm-gateway" / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
]


def _table_rows(text: str) -> dict[str, list[str]]:
    """First cell (backticks stripped) -> the row's cells, for each body row of the markdown tables in `text`."""
    rows = {}
    for line in text.splitlines():
        if not line.startswith("| `"):
            continue
        cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        rows[cells[0].strip("`")] = cells
    return rows


def _documented_settings() -> dict[str, list[str]]:
    return _table_rows(settings_doc.block(CONFIGURATION.read_text()))


def _settings() -> dict[str, str]:
    """Environment variable -> its default as the table writes it."""
    return {var: default for var, default, _ in settings_doc.rows()}


def test_every_setting_has_its_row() -> None:
    missing = sorted(set(_settings()) - set(_documented_settings()))
    assert not missing, f"settings without a row in docs/configuration.md: {missing}; {REGENERATE}"


def test_every_documented_setting_exists() -> None:
    gone = sorted(set(_documented_settings()) - set(_settings()))
    assert not gone, f"docs/configuration.md documents settings that no longer exist: {gone}; {REGENERATE}"


def test_documented_defaults_are_the_settings_defaults() -> None:
    documented = _documented_settings()
    wrong = {
        var: (documented[var][1], default)
        for var, default in _settings().items()
        if var in documented and documented[var][1] != default
    }
    assert not wrong, f"defaults that differ (documented, actual): {wrong}; {REGENERATE}"


def test_every_setting_has_a_description() -> None:
    bare = [name for name, field in Settings.model_fields.items() if not (field.description or "").strip()]
    assert not bare, f"give these fields a Field(description=...) in gateway/settings.py: {bare}"


def test_the_settings_table_is_generated() -> None:
    # Descriptions and order too: the table is exactly what the generator writes.
    assert settings_doc.block(CONFIGURATION.read_text()) == settings_doc.render_table(), REGENERATE


def test_the_generator_rewrites_only_its_block() -> None:
    text = CONFIGURATION.read_text()
    stale = text.replace(settings_doc.block(text), "| variable | default | meaning |\n|---|---|---|")
    assert settings_doc.updated(stale) == settings_doc.updated(text)
    assert settings_doc.block(settings_doc.updated(stale)) == settings_doc.render_table()


def test_env_names_and_defaults_render_as_set() -> None:
    fields = Settings.model_fields
    assert settings_doc.env_name("grpc_experiments", fields["grpc_experiments"]) == "GRPC_EXPERIMENTS"
    assert settings_doc.env_name("max_n", fields["max_n"]) == "GATEWAY_MAX_N"
    assert [settings_doc.render_default(v) for v in (None, False, 600.0, 0.25, {}, "")] == [
        "unset", "`false`", "`600`", "`0.25`", "`{}`", '`""`'
    ]


class _Recorder(dict):
    """A `parameters` map that remembers every key the backend asks for."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: set[str] = set()

    def get(self, key, default=None):  # type: ignore[override]
        self.asked.add(key)
        return super().get(key, default)


def _backend_parameters() -> set[str]:
    from vllm_backend.devices import GPU_DEVICE_IDS
    from vllm_backend.params import BackendParams

    parameters = _Recorder()
    BackendParams.from_config({"parameters": parameters})
    return parameters.asked | {GPU_DEVICE_IDS}


def _documented_backend_parameters() -> set[str]:
    text = CONFIGURATION.read_text()
    section = text.split("## The backend's parameters", 1)[1].split("\n## ", 1)[0]
    return set(_table_rows(section))


def test_every_backend_parameter_has_its_row() -> None:
    read = _backend_parameters()
    assert "REPORT_CUSTOM_METRICS" in read  # the recorder sees what from_config reads
    missing = sorted(read - _documented_backend_parameters())
    assert not missing, f"backend parameters without a row in docs/configuration.md: {missing}"


def test_every_documented_backend_parameter_is_read() -> None:
    gone = sorted(_documented_backend_parameters() - _backend_parameters())
    assert not gone, f"docs/configuration.md documents backend parameters the backend does not read: {gone}"


# Links: GitHub's rules for heading anchors.

_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.S | re.M)
_CODE = re.compile(r"`+[^`\n]*`+")
_LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", re.M)


def _prose(text: str) -> str:
    return _FENCE.sub("", text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text lowercased, punctuation but - and _ dropped, spaces to -."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading anchors by its text
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for heading in _HEADING.findall(_prose(path.read_text())):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        out.add(base if count == 0 else f"{base}-{count}")
    return out


def links(path: Path) -> list[str]:
    prose = _CODE.sub("", _prose(path.read_text()))
    return [target for target in _LINK.findall(prose) if not re.match(r"[a-z][a-z0-9+.-]*:", target)]


def test_slugs_follow_githubs_rules() -> None:
    assert slug("Stopping: the drain, and Kubernetes") == "stopping-the-drain-and-kubernetes"
    assert slug("CPU placement and the engine core's priority") == "cpu-placement-and-the-engine-cores-priority"
    assert slug("Where A's time to first token goes") == "where-as-time-to-first-token-goes"
    assert slug("`GATEWAY_*` settings (all)") == "gateway_-settings-all"
    assert slug("Part 1, end to end") == "part-1-end-to-end"


@pytest.mark.parametrize("page", LINKED_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_resolves(page: Path) -> None:
    broken = []
    for target in links(page):
        name, _, fragment = target.partition("#")
        path = (page.parent / name).resolve() if name else page
        if not path.exists():
            broken.append(f"{target}: no such file")
        elif fragment and path.suffix == ".md" and fragment not in anchors(path):
            broken.append(f"{target}: no heading #{fragment} in {path.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: {broken}"


def test_pages_have_links_checked() -> None:
    # The checker finds links at all (a regex that matched nothing would pass every page).
    assert "docs/configuration.md" in links(ROOT / "README.md")


def test_front_pages_keep_their_size() -> None:
    # Bytes, as `wc -c` counts them.
    assert len((ROOT / "README.md").read_bytes()) <= 12_000, "README.md: at most 12,000 bytes"
    assert len((ROOT / "bench" / "README.md").read_bytes()) <= 20_000, "bench/README.md: at most 20,000 bytes"

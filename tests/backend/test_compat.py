"""The compatibility layer's detection: the choice logic, the static (ast) probe on made-up releases, and the
runtime probe on the installed vLLM agreeing with the static one on its sources."""

from __future__ import annotations

import textwrap
from pathlib import Path

import vllm
from vllm_backend import compat
from vllm_backend.compat_names import FEATURES, Alternative, Feature, Name, choose, choose_all
from vllm_backend.compat_static import SourceTree

NEW = Name("pkg.mod", "New")
OLD = Name("pkg.mod", "Old")
FEATURE = Feature("thing", (Alternative("new", (NEW,)), Alternative("old", (OLD,))))


def test_first_present_alternative_wins() -> None:
    assert choose(FEATURE, lambda name: True).alternative.key == "new"
    choice = choose(FEATURE, lambda name: name == OLD)
    assert choice.alternative.key == "old" and choice.missing == {"new": [NEW]}


def test_required_feature_without_alternative_is_not_ok() -> None:
    choice = choose(FEATURE, lambda name: False)
    assert choice.alternative is None and not choice.ok
    assert choice.missing == {"new": [NEW], "old": [OLD]}
    optional = Feature("opt", FEATURE.alternatives, required=False)
    assert choose(optional, lambda name: False).ok


def test_check_choices_names_what_is_missing() -> None:
    try:
        compat.check_choices([choose(FEATURE, lambda name: False)])
    except ImportError as exc:
        assert "pkg.mod.New" in str(exc) and "pkg.mod.Old" in str(exc)
    else:  # pragma: no cover
        raise AssertionError("a release without the feature must fail the load")


def test_record_arguments_positional_or_keyword() -> None:
    assert compat.record_arguments(("s", "i", None, 0), {}) == ("s", "i")
    assert compat.record_arguments(("s", "i"), {"engine_idx": 1}) == ("s", "i")
    assert compat.record_arguments((), {"scheduler_stats": "s", "iteration_stats": "i"}) == ("s", "i")
    assert compat.record_arguments(("s",), {"iteration_stats": "i", "mm_cache_stats": None}) == ("s", "i")


def _release(root: Path, files: dict[str, str]) -> SourceTree:
    for path, text in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(textwrap.dedent(text))
    return SourceTree(root)


def test_static_probe_follows_reexports_aliases_and_lazy_tables(tmp_path: Path) -> None:
    tree = _release(tmp_path, {
        "vllm/__init__.py": 'MODULE_ATTRS = {"AsyncEngineArgs": ".engine.arg_utils:AsyncEngineArgs"}\n',
        "vllm/engine/__init__.py": "",
        "vllm/engine/arg_utils.py": """
            class EngineArgs:
                def create_engine_config(self, usage_context=None): ...
            class AsyncEngineArgs(EngineArgs):
                enable_log_requests: bool = False
        """,
        "vllm/engine/async_llm_engine.py": "from vllm.v1.engine.async_llm import AsyncLLM\nAsyncLLMEngine = AsyncLLM\n",
        "vllm/v1/__init__.py": "",
        "vllm/v1/engine/__init__.py": "",
        "vllm/v1/engine/async_llm.py": """
            from ..client import EngineClient
            class AsyncLLM(EngineClient):
                def __init__(self, vllm_config):
                    self.model_config = vllm_config.model_config
                @classmethod
                def from_engine_args(cls, engine_args, *, stat_loggers=None): ...
        """,
        "vllm/v1/client.py": """
            try:
                from typing import Protocol
            except ImportError:
                Protocol = object
            class EngineClient:
                async def check_health(self): ...
        """,
    })  # fmt: skip
    assert tree.exists(Name("vllm", "AsyncEngineArgs"))
    assert tree.exists(Name("vllm", "AsyncEngineArgs", "create_engine_config"))  # inherited
    assert tree.exists(Name("vllm.engine.arg_utils", "AsyncEngineArgs", "enable_log_requests"))
    engine = "vllm.engine.async_llm_engine"
    assert tree.exists(Name(engine, "AsyncLLMEngine", "from_engine_args", "stat_loggers"))
    assert not tree.exists(Name(engine, "AsyncLLMEngine", "from_engine_args", "loggers"))
    assert tree.exists(Name(engine, "AsyncLLMEngine", "model_config"))  # set on self in __init__
    assert tree.exists(Name(engine, "AsyncLLMEngine", "check_health"))  # from a base, relative import
    assert not tree.exists(Name(engine, "AsyncLLMEngine", "is_sleeping"))
    assert not tree.exists(Name("vllm.inputs", "tokens_input"))  # no such module
    assert tree.exists(Name("vllm.v1", "engine"))  # a submodule


def test_static_and_runtime_probes_agree_on_the_installed_vllm() -> None:
    site = Path(vllm.__file__).parents[1]
    static = {c.feature.name: c.alternative and c.alternative.key for c in choose_all(SourceTree(site).exists)}
    runtime = {name: c.alternative and c.alternative.key for name, c in compat.CHOICES.items()}
    assert static == runtime
    assert len(runtime) == len(FEATURES)


def test_runtime_members_include_instance_attributes() -> None:
    class Engine:
        def __init__(self) -> None:
            self.model_config = None

    assert compat.has_member(Engine, "model_config")
    assert not compat.has_member(Engine, "tokenizer_config")

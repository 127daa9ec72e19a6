"""Part 4's pure side: the workload's prompts, the engines' cache size, and the figures and targets drawn from
each policy's run (bench/routing_report.py, bench/prefix_load.py's prompt sizing)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from bench import conversations, prefix_load
from bench import routing_report as rr
from bench import routing as bench_routing
from bench import run as bench_run
from bench.prefix_load import fewest_words, system_prompts
from bench.routing import Routing, RoutingConfig
from localstack.paths import DEFAULT_MODEL_NAME, CachePaths, default_cache_dir


def _run(
    policy: str, replicas: list[tuple[float, float, float]], p90: float = 100.0, failed: int = 0, tok_s: float = 500.0
) -> dict:
    """A run as bench.prefix_load writes it: per replica (queried tokens, cached tokens, mean waiting)."""
    return {
        "policy": policy,
        "completed": 10,
        "failed": failed,
        "p50_ttft_ms": p90 / 2,
        "p90_ttft_ms": p90,
        "output_throughput": tok_s,
        "prompt_tokens_mean": 1050.0,
        "replicas": [
            {"replica": f"r{i}", "queries": q, "hits": h, "waiting_mean": w, "requests": 5}
            for i, (q, h, w) in enumerate(replicas)
        ],
    }


def test_words_are_fixed_by_their_seed_and_a_longer_run_extends_a_shorter_one() -> None:
    assert rr.words("a", 20) == rr.words("a", 20)
    assert rr.words("a", 20) != rr.words("b", 20)
    assert rr.words("a", 30).startswith(rr.words("a", 20))
    assert len(rr.words("a", 20).split()) == 20


def test_fewest_words_is_the_shortest_run_that_reaches_the_count() -> None:
    def count(text: str) -> int:  # a stand-in tokenizer: one token per word
        return len(text.split())

    assert len(fewest_words("s", 37, count).split()) == 37
    prompts = system_prompts("t", 3, 50, count)
    assert len(set(p[:12] for p in prompts)) == 3  # distinct from their first characters
    assert all(count(p) >= 50 for p in prompts)


def test_requests_pick_their_system_prompt_out_of_step_with_round_robin() -> None:
    picks = [rr.prefix_of_request("run", i, 4) for i in range(400)]
    assert set(picks) == {0, 1, 2, 3}
    assert picks == [rr.prefix_of_request("run", i, 4) for i in range(400)]
    even = [p for i, p in enumerate(picks) if i % 2 == 0]  # what round-robin would send to one replica
    assert set(even) == {0, 1, 2, 3}


def test_kv_blocks_hold_a_share_of_the_prompts_and_the_running_requests() -> None:
    # 4 prompts of 8 full blocks over 2 replicas: 2 x 8, plus a block for each of 32 clients, plus 4 spare.
    assert rr.kv_blocks(4, 1024, 64, 2, 128) == 16 + 32 + 4
    assert rr.kv_blocks(4, 1100, 64, 2, 128) == 16 + 32 + 4  # a partial block is not shared
    assert rr.kv_blocks(4, 1024, 64, 2, 128) < 4 * 8 + 32  # round-robin's every prompt on every replica does not fit
    # Never less than one request of the model's longest length.
    assert rr.kv_blocks(1, 100, 2, 2, 128, max_model_len=2048) == 17


def test_sample_sum_reads_one_model_and_unlabelled_samples() -> None:
    text = (
        "# TYPE vllm:prefix_cache_hits counter\n"
        'vllm:prefix_cache_hits_total{model="m",version="1"} 30\n'
        'vllm:prefix_cache_hits_total{model="other",version="1"} 7\n'
        "# TYPE vllm:num_requests_waiting gauge\n"
        "vllm:num_requests_waiting 2\n"
    )
    families = list(text_string_to_metric_families(text))
    assert rr.sample_sum(families, "vllm:prefix_cache_hits_total", "m") == 30
    assert rr.sample_sum(families, "vllm:num_requests_waiting", "m") == 2
    assert rr.sample_sum(families, "vllm:absent", "m") == 0


def test_hit_rate_and_queue_ratio() -> None:
    assert rr.hit_rate(75, 100) == 0.75
    assert rr.hit_rate(0, 0) is None
    assert rr.queue_ratio([3.0, 1.0]) == 1.5
    assert rr.queue_ratio([0.0, 0.0]) == 1.0  # no queue anywhere is an even one
    assert rr.queue_ratio([]) is None


def test_a_row_sums_the_replicas_counters_before_dividing() -> None:
    row = rr.policy_row(_run("prefix", [(1000, 900, 1.0), (100, 0, 3.0)]))
    assert row["hit_rate"] == 900 / 1100  # not the mean of 0.9 and 0.0
    assert row["hit_rate_per_replica"] == {"r0": 0.9, "r1": 0.0}
    assert row["busiest_queue_over_average"] == 1.5
    assert row["errors"] == 0 and row["ttft_p90_ms"] == 100.0


def test_targets_read_prefix_against_round_robin_least_load_and_the_single_replica() -> None:
    found = rr.rows([
        _run(rr.SINGLE, [(1000, 900, 2.0)]),
        _run("round_robin", [(1000, 600, 4.0), (1000, 600, 1.0)], p90=400.0),
        _run("least_load", [(1000, 600, 1.0), (1000, 600, 1.0)], p90=250.0),
        _run("prefix", [(1000, 850, 1.0), (1000, 850, 1.2)], p90=150.0, tok_s=600.0),
        _run(rr.RESTART, [(1000, 800, 1.0), (300, 100, 1.0)], p90=900.0),
    ])  # fmt: skip
    ratios = rr.ratios(found)
    assert ratios["prefix/round_robin TTFT p90"] == 150.0 / 400.0
    assert ratios["prefix/least_load TTFT p90"] == 150.0 / 250.0
    assert ratios["prefix/round_robin tok/s"] == 600.0 / 500.0
    assert abs(ratios["prefix/single hit rate"] - 0.85 / 0.9) < 1e-9
    verdicts = {t["target"]: t["pass"] for t in rr.targets(found)}
    assert len(verdicts) == 7 and all(verdicts.values()), verdicts


def test_targets_fail_on_slow_prefix_routing_a_hot_replica_or_any_error() -> None:
    found = rr.rows([
        _run(rr.SINGLE, [(1000, 900, 2.0)]),
        _run("round_robin", [(1000, 600, 1.0), (1000, 600, 1.0)], p90=200.0, failed=1),
        _run("prefix", [(1000, 500, 3.0), (1000, 500, 0.0)], p90=150.0),
    ])  # fmt: skip
    verdicts = [t["pass"] for t in rr.targets(found)]
    # 0.75x round_robin, no least_load run, 1.0x its rate, 0.56x the hit rate, 2.0x queue, 1 error, no restart run
    assert verdicts == [False, None, False, False, False, False, None]


_RESTART = {
    "replica": "127.0.0.1:8101", "restarted_after_s": 5.0, "drained_and_stopped_s": 1.2, "ready_again_s": 20.5,
    "requests_before": 40.0, "requests_while_away": 0.0, "requests_after_back": 31.0, "tail_s": 15.0,
}  # fmt: skip


def test_errors_through_a_restart_are_their_own_target_and_its_figures_are_reported() -> None:
    restart_run = {**_run(rr.RESTART, [(1000, 800, 1.0), (200, 100, 1.0)], failed=2), "restart": _RESTART}
    found = rr.rows([_run("prefix", [(1000, 800, 1.0), (1000, 800, 1.0)]), restart_run])
    verdicts = {t["target"]: t["pass"] for t in rr.targets(found)}
    assert verdicts["part 4: errors, every policy"] is True
    assert verdicts["part 4: errors through a replica restart"] is False
    text = rr.markdown({"rows": found})
    assert f"| {rr.RESTART} |" in text
    assert "ready again 20.5 s later" in text and "31 in the 15 s after" in text


def test_a_counter_that_went_back_restarted_with_its_replica() -> None:
    assert rr.counter_delta(100.0, 250.0) == 150.0
    assert rr.counter_delta(100.0, 30.0) == 30.0  # counted since the restart


def test_targets_without_a_baseline_are_not_applicable_and_the_table_still_renders() -> None:
    found = rr.rows([_run("prefix", [(1000, 800, 1.0), (1000, 800, 1.0)])])
    assert [t["pass"] for t in rr.targets(found)][:2] == [None, None]
    assert rr.targets([]) == []
    text = rr.markdown({"rows": found, "workload": {"clients": 64}, "error": "boom"})
    assert "| prefix |" in text and "boom" in text and "clients 64" in text


def test_part_4_serves_the_model_it_is_given_by_name_or_folder(tmp_path: Path) -> None:
    routing = Routing(RoutingConfig(out_dir=tmp_path, model=DEFAULT_MODEL_NAME))
    assert routing.model.folder == CachePaths(default_cache_dir()).default_model_dir
    assert routing.config.workload()["model"] == DEFAULT_MODEL_NAME
    folder = tmp_path / "My-Model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    served = Routing(RoutingConfig(out_dir=tmp_path, model=str(folder))).model
    assert (served.folder, served.name) == (folder, "my-model")  # a Triton model name, not the path


def test_the_multiturn_scenario_sizes_the_cache_for_the_conversations_it_runs(tmp_path: Path) -> None:
    single = RoutingConfig(out_dir=tmp_path, clients=8)
    talks = RoutingConfig(out_dir=tmp_path, clients=8, scenario="multiturn")
    assert single.words_per_user_message == 8 and talks.words_per_user_message == 24
    assert single.history_tokens() == 0 and 0 < talks.history_tokens() < 2048 - 1024 - talks.max_tokens
    own = -(-talks.history_tokens() // 128)
    assert talks.engine_blocks() == rr.kv_blocks(4, 1024, 8, 2, 128) + 4 * (own - 1)
    assert talks.workload()["scenario"] == "multiturn" and talks.workload()["turns"] == "4 to 8"
    assert "turns" not in single.workload()


def test_part_4_takes_the_scenario_and_its_turns_from_the_command_line() -> None:
    args = bench_run.parse_args(["--part4", "--scenario", "multiturn", "--turns", "3,5", "--zipf", "1.2"])
    assert (args.scenario, args.turns, args.zipf, args.user_words) == ("multiturn", [3, 5], 1.2, None)
    assert bench_run.parse_args(["--part4"]).scenario == "single"
    with pytest.raises(SystemExit):
        bench_run.parse_args(["--part4", "--turns", "5,3"])


def test_the_longest_multiturn_prompt_is_the_last_turn_of_the_longest_conversation() -> None:
    args = prefix_load.parse_args(["--url", "u", "--model", "m", "--tokenizer", "t", "--metrics-urls", "[]",
                                   "--replicas", "[]", "--tag", "x", "--out", "o", "--scenario", "multiturn"])  # fmt: skip
    systems = ["short", "a much longer system prompt"]
    words_in = lambda messages: sum(len(m["content"].split()) for m in messages)  # noqa: E731
    longest = prefix_load.longest_prompt_tokens(args, systems, words_in)
    talk = conversations.Conversation(0, 1, args.max_turns)
    last = conversations.turn_messages("x", talk, args.max_turns - 1, systems[1], args.user_words, 6)
    assert longest == words_in(last) and prefix_load.reply_words(16) == 6


def test_part_4_engines_cache_prefixes_in_a_capped_cache_and_are_checked_patiently(tmp_path: Path) -> None:
    config = RoutingConfig(out_dir=tmp_path, scenario="multiturn", clients=8, memory_share=0.08)
    routing = Routing(config)
    target = bench_routing._repository(config, routing.model)
    args = json.loads((target / routing.model.name / "1" / "model.json").read_text())
    assert args["enable_prefix_caching"] and args["num_gpu_blocks_override"] == config.engine_blocks()
    assert args["gpu_memory_utilization"] == 0.08
    pbtxt = (target / routing.model.name / "config.pbtxt").read_text()
    assert 'key: "VLLM_HEALTH_CHECK_INTERVAL_S" value: { string_value: "10" }' in pbtxt

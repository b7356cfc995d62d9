"""tide_dspy.cost: token counting, prices, the rendered-prompt estimate, the window pre-check and the budget stop."""

from __future__ import annotations

import json

import dspy
import pytest
from routed_lm import RoutedLM, fixture_instances

from tide_dspy.backbones import get_lm
from tide_dspy.cost.estimate import Call, Estimator, PromptCounter, Tally
from tide_dspy.cost.guard import Budget, Guard
from tide_dspy.cost.optimizers import optimizer_plan
from tide_dspy.cost.prices import (
    DEFAULT_OUTPUT_TOKENS,
    FREE,
    Overrides,
    Prices,
    Target,
    model_prices,
    parse_price,
)
from tide_dspy.cost.usage import entries_usage, entry_cost
from tide_dspy.evaluation import evaluate, format_table, read_rows
from tide_dspy.programs import build_program
from tide_dspy.util import tokens


@pytest.fixture(scope="module")
def train():
    return fixture_instances("workspace", "train")


# ---- counting ----

def test_count_tokens_uses_the_bpe_litellm_bundles():
    assert tokens.tokenizer_name() == "o200k_base (tiktoken)"
    text = "The quick brown fox jumps over the lazy dog."
    assert tokens.count_tokens(text) == 10  # the BPE, not 45 characters / 4
    assert tokens.count_tokens("<|endoftext|>") > 1  # special-token text counts as ordinary text


def test_count_tokens_falls_back_to_four_characters_without_a_vocabulary(monkeypatch):
    monkeypatch.setattr(tokens, "VOCABULARY", "no-such-vocabulary")
    tokens._encoding.cache_clear()
    try:
        assert tokens.tokenizer_name() == "4 characters per token"
        assert tokens.count_tokens("abcdefghi") == tokens.estimate_tokens("abcdefghi") == 3
    finally:
        tokens._encoding.cache_clear()


def test_prompt_counter_counts_segments_like_the_whole_text():
    counter = PromptCounter()
    text = "[[ ## context ## ]]\nalpha beta gamma\n\n[[ ## templates ## ]]\ndelta\n\n[[ ## max_new ## ]]\n3"
    assert counter.text(text) == tokens.count_tokens(text)
    first = [{"role": "system", "content": "rules"}, {"role": "user", "content": "shared prefix, then A"}]
    later = [{"role": "system", "content": "rules"}, {"role": "user", "content": "shared prefix, then B and more"}]
    shared = counter.shared_prefix(first, later)
    assert counter.messages(first[:1]) < shared < counter.messages(later)


# ---- prices ----

def test_parse_price_reads_in_out_and_an_optional_cached_price():
    assert parse_price("0.25,2") == Prices(0.25, 2.0, None, "--price")
    assert parse_price(" 3, 15, 0.3 ").cached_prompt == 0.3
    for bad in ("3", "a,b", "1,2,3,4", "-1,2", "nan,1"):
        with pytest.raises(ValueError, match="IN,OUT"):
            parse_price(bad)


def test_targets_take_prices_and_windows_from_the_cost_map_and_the_rules():
    claude = Target.of(get_lm("claude-sonnet-4.5"))
    assert (claude.window, claude.prices.prompt, claude.provider, claude.reasoning) == (200_000, 3.0, "anthropic", 0)
    assert (claude.output, claude.prices.cache_write) == (DEFAULT_OUTPUT_TOKENS, 3.75)
    mini = Target.of(get_lm("gpt-5-mini"))
    assert (mini.window, mini.max_prompt, mini.prices.completion) == (400_000, 272_000, 2.0)  # the rules' window
    assert mini.reasoning > 0  # a reasoning model thinks on every call
    assert Target.of(get_lm("gemini-3.5-flash")).window == 1_048_576  # the map's input limit
    qwen = Target.of(get_lm("qwen-3.6-flash"))  # priced and sized by the map's entry the rules name
    assert (qwen.window, qwen.prices.prompt) == (1_000_000, 0.1875)
    assert Target.of(get_lm("local-small")).prices == FREE
    assert Target.of(get_lm("openai/some-new-model")).prices is None  # not in the map: --price is needed
    override = Target.of(get_lm("qwen-3.6-flash"), prices=Prices(1, 2), window=1000)
    assert (override.prices.prompt, override.window, override.window_source) == (1, 1000, "--context-window")


def test_the_cost_maps_batch_prices_are_reachable():
    assert model_prices("openai/gpt-5-mini", tier="batches").prompt == pytest.approx(0.125)
    assert model_prices("openai/gpt-5-mini").prompt == pytest.approx(0.25)


def test_tally_cost_prices_cached_tokens_at_the_cache_price():
    tally = Tally().add([Call("backbone", "round", prompt=1_000_000, output=100_000, cached=600_000)])
    prices = Prices(3.0, 15.0, 0.30)
    assert tally.cost(prices) == pytest.approx(3.0 + 1.5)
    assert tally.cost(prices, caching=True) == pytest.approx(0.4 * 3.0 + 0.6 * 0.30 + 1.5)
    assert tally.cost(Prices(3.0, 15.0, None), caching=True) == pytest.approx(4.5)  # no cache price, no discount
    assert tally.cost(None) is None


def test_entry_cost_prefers_what_the_provider_reported():
    prices = Prices(1.0, 10.0)
    assert entry_cost({"cost": 0.5, "usage": {"prompt_tokens": 10**6}}, prices) == 0.5
    assert entry_cost({"cost": None, "usage": {"prompt_tokens": 10**6, "completion_tokens": 10**5}}, prices) == 2.0
    assert entry_cost({"usage": {"input_tokens": 10**6}}, None) == 0.0


def test_a_run_budget_prices_a_call_as_its_usage_summary_does_cache_reads_included():
    prices = Prices(0.25, 2.0, 0.025)
    entry = {"cost": None, "usage": {"prompt_tokens": 1000, "completion_tokens": 100,
                                     "prompt_tokens_details": {"cached_tokens": 800}}}
    # 200 plain prompt tokens, 800 at the cache-read price, 100 output: $0.00027 (tokens alone would be $0.00045).
    assert entry_cost(entry, prices) == pytest.approx(0.00027)
    assert entries_usage([entry], "gpt-5-mini", prices)["cost_usd"] == pytest.approx(entry_cost(entry, prices))


def test_a_cache_write_costs_the_write_price():
    prices = Prices(3.0, 15.0, 0.30, cache_write=3.75)
    entry = {"usage": {"prompt_tokens": 10**6, "completion_tokens": 0, "cache_creation_input_tokens": 10**6}}
    assert entry_cost(entry, prices) == pytest.approx(3.75)


# ---- the rendered prompts ----

def test_round_one_is_rendered_exactly_as_the_run_sends_it(train):
    program = build_program("iter", "workspace", max_rounds=3, per_round=1)
    lm = RoutedLM(train)
    with dspy.context(lm=lm):
        program(train[0])
        rendered = Estimator().round_messages(program, train[0])
    sent = [entry["messages"] for entry in lm.history]
    assert len(sent) == len(rendered) == 3  # every round ran, as the estimate assumes
    assert sent[0] == rendered[0][0]
    counter = PromptCounter()
    for s, (r, _) in zip(sent, rendered):
        # Later rounds differ only in `already_found`, written with stand-in findings.
        assert counter.messages(r) == pytest.approx(counter.messages(s), rel=0.15)


def test_call_plans_per_method(train):
    instance, estimator = train[0], Estimator()
    tide = estimator.program_calls(build_program("iter", "workspace", max_rounds=4, per_round=2), instance)
    multi = estimator.program_calls(build_program("multi", "workspace", max_rounds=4, per_round=2), instance)
    single = estimator.program_calls(build_program("single", "workspace", max_findings=8), instance)
    assert build_program("iter", "workspace", max_rounds=3, per_round=2).call_plan() == [(0, 2), (2, 2), (4, 2)]
    assert len(tide) == len(multi) == 4 and len(single) == 1
    assert [c.prompt for c in tide] == sorted(c.prompt for c in tide) and tide[-1].prompt > tide[0].prompt
    assert len({c.prompt for c in multi}) == 1  # independent samples: the same prompt
    # Rounds 2..T repeat round 1's static prefix; Multi's samples repeat all of it.
    assert tide[0].cached == 0 and all(0 < c.cached < c.prompt for c in tide[1:])
    assert all(c.cached == c.prompt for c in multi[1:])
    assert estimator.program_calls(build_program("random", "workspace"), instance) == []


def test_judge_calls_rate_each_gold_problem_that_a_finding_can_match(train):
    instance = train[0]
    setting = build_program("single", "workspace").setting
    calls = Estimator().judge_calls(setting, instance, n_findings=3)
    assert len(calls) == 2 * 3  # identification and resolution, for 3 of the 5 gold problems
    assert len(Estimator().judge_calls(setting, instance, n_findings=20)) == 2 * len(instance.problems)


def test_outputs_are_capped_at_the_requested_tokens_and_add_thinking(train):
    program = build_program("single", "workspace", max_findings=10)
    plain = Estimator().program_calls(program, train[0])[0].output
    thinking = Estimator(reasoning={"backbone": 2000}).program_calls(program, train[0])[0].output
    capped = Estimator(max_output={"backbone": 100}).program_calls(program, train[0])[0].output
    assert thinking == plain + 2000 and capped == 100


def test_copro_plan_follows_breadth_and_depth():
    one = optimizer_plan(dspy.teleprompt.COPRO, {"breadth": 3, "depth": 2}, {}, n_train=6, n_val=2, predictors=1)
    # 3 candidates at each of 2 steps; proposals: 2 candidates, then 3 at the second step (one request each).
    assert (one.train_passes, one.val_passes, one.proposals, one.evaluations(6, 2)) == (6, 0, 5, 36)
    # With two predictors each step scores every candidate so far: 3, then 6, per predictor.
    two = optimizer_plan(dspy.teleprompt.COPRO, {"breadth": 3, "depth": 2}, {}, n_train=6, n_val=2, predictors=2)
    assert (two.train_passes, two.proposals) == (18, 10)
    with pytest.raises(ValueError, match="no call plan for optimizer object"):
        optimizer_plan(object, {}, {}, n_train=1, n_val=1, predictors=1)


def test_the_plans_count_evaluations_only_where_the_arguments_fix_them():
    mipro = optimizer_plan(dspy.teleprompt.MIPROv2, {"auto": None}, {"num_trials": 4}, n_train=6, n_val=3,
                           predictors=1)
    assert mipro.evaluations(6, 3) == 15  # the default program and 4 trials on 3 validation instances
    assert optimizer_plan(dspy.teleprompt.MIPROv2, {"auto": "light"}, {}, n_train=6, n_val=3,
                          predictors=1).evaluations(6, 3) is None


# ---- the window pre-check ----

def test_an_instance_over_a_tiny_window_is_skipped_counted_and_never_sent(tmp_path, train):
    program = build_program("iter", "workspace", max_rounds=2, per_round=2)
    sizes = {i.instance_id: Estimator().largest_prompt(program, i) for i in train}
    big, small = sorted(train, key=lambda i: -sizes[i.instance_id])
    window = (sizes[big.instance_id] + sizes[small.instance_id]) // 2 + 100
    lm, out = RoutedLM(train), tmp_path / "results.jsonl"
    result = evaluate(program, train, out_path=out, lm=lm, progress=False,
                      overrides=Overrides(window=window, output=100))
    assert lm.calls == 2  # only the instance that fits ran (two rounds)
    assert result.n_skipped == 1 and result.n_instances == 1 and result.n_failed == 0
    assert list(result.skipped) == [big.instance_id] and "over the window" in result.skipped[big.instance_id]
    row = read_rows(out)[big.instance_id]
    assert row["skipped"] and row["score"] is None and row["error"] is None  # not scored, not an error, not a 0
    assert "skipped: 1 (over the window)" in format_table(result)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["n_skipped"] == 1 and big.instance_id in summary["skipped"]

    again = RoutedLM(train)
    resumed = evaluate(program, train, out_path=out, lm=again, progress=False, resume=True,
                       overrides=Overrides(window=window, output=100))
    assert again.calls == 0 and resumed.n_skipped == 1  # checked again for free, not retried against the LM


def test_a_prompt_over_the_providers_input_limit_is_skipped_though_the_window_holds_it(train):
    import dataclasses

    program = build_program("single", "workspace")
    guard = Guard(Budget(), Overrides().targets({"backbone": get_lm("gpt-5-mini")}), program)
    assert guard.targets["backbone"].max_prompt == 272_000
    prompt = Estimator().largest_prompt(program, train[0])
    guard.targets["backbone"] = dataclasses.replace(guard.targets["backbone"], max_prompt=prompt - 1)
    assert guard.skip_reason(train[0]).startswith("over the input limit")


def test_the_skip_reason_names_a_long_context_option_where_the_provider_has_one():
    claude = Target("claude-sonnet-4.5", window=200_000, output=16_384, provider="anthropic").skip_reason(195_000)
    assert "211,384 in all" in claude and "context-1m-2025-08-07" in claude
    assert "anthropic-beta" not in Target("x", window=15, output=10, provider="openai").skip_reason(10)
    assert Target("x", window=None).skip_reason(10**9) is None  # an unknown window holds anything


# ---- the budget ----

def test_max_cost_stops_cleanly_and_resume_continues(tmp_path, train):
    program = build_program("iter", "workspace", max_rounds=2, per_round=2)
    prices = Prices(10.0, 10.0)

    def estimated(instance):
        return sum((c.prompt + c.output) * 10.0 / 1e6 for c in Estimator().instance_calls(program, instance, False))

    # The cheaper instance first: it fits the budget; what it spent (RoutedLM reports 15 tokens a call) plus the
    # dearer one's estimate does not.
    ordered = sorted(train, key=estimated)
    budget = (estimated(ordered[0]) + estimated(ordered[1])) / 2
    out = tmp_path / "results.jsonl"
    lm = RoutedLM(train)
    result = evaluate(program, ordered, out_path=out, lm=lm, progress=False, budget=Budget(max_cost=budget),
                      overrides=Overrides(prices={"backbone": prices}))
    assert result.budget["stopped"].startswith("stopped at the budget") and len(result.budget["not_run"]) == 1
    assert lm.calls == 2 and len(read_rows(out)) == 1  # the finished row is kept
    assert "stopped at the budget" in format_table(result) and "--resume" in format_table(result)
    assert json.loads((tmp_path / "summary.json").read_text())["budget"]["stopped"]

    more = RoutedLM(train)
    # The budget is this session's: a second session with room for the dearer instance runs only that one.
    resumed = evaluate(program, ordered, out_path=out, lm=more, progress=False, resume=True,
                       budget=Budget(max_cost=2 * estimated(ordered[1])),
                       overrides=Overrides(prices={"backbone": prices}))
    assert more.calls == 2 and resumed.n_resumed == 1 and resumed.budget["stopped"] is None
    assert len(read_rows(out)) == 2


def test_max_cost_needs_a_price(train):
    program = build_program("iter", "workspace", max_rounds=1)
    with pytest.raises(ValueError, match="--max-cost needs a price.*--price IN,OUT"):
        evaluate(program, train, lm=RoutedLM(train), progress=False, budget=Budget(max_cost=1.0))
    with pytest.raises(ValueError, match="positive"):
        Budget(max_cost=0)
    with pytest.raises(ValueError, match="--max-calls must be >= 1"):
        Budget(max_calls=0)


def test_max_calls_stops_an_evaluation_before_the_instance_that_would_pass_it(tmp_path, train):
    program = build_program("iter", "workspace", max_rounds=2, per_round=2)
    lm = RoutedLM(train)
    result = evaluate(program, train, out_path=tmp_path / "results.jsonl", lm=lm, progress=False,
                      budget=Budget(max_calls=3))  # the first instance's two rounds fit, the second's do not
    assert lm.calls == 2 and result.budget["calls"] == 2 and len(result.budget["not_run"]) == 1
    assert "stopped at the budget: 2 LM calls" in format_table(result)

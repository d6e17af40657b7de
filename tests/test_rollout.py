"""The RAGEN multi-turn rollout: exact token layout, spans, rewards, budgets, and the TRL integration."""

from types import SimpleNamespace

import pytest
import torch
from datasets import Dataset
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from trl import GRPOConfig, GRPOTrainer

from trl_ragen2 import SNRFilteredGRPOConfig, SNRFilteredGRPOTrainer
from trl_ragen2.agents.generation import ScriptedPolicy
from trl_ragen2.agents.rollout import ROLLOUT_STAT_KEYS, EpisodeSpec, RolloutConfig, RolloutEngine
from trl_ragen2.agents.rollout_func import (
    RagenRollout,
    aggregate_env_metrics,
    env_return,
    evaluate_episodes,
    log_env_metrics,
)
from trl_ragen2.models.tiny import make_tiny_model
from trl_ragen2_envs.datasets import build_rows
from trl_ragen2_envs.sokoban.generation import solve


def solver_reply(episode, actions=2):
    """A perfect Sokoban player: the next moves of a shortest solution."""
    plan = solve(episode.env.room) or ["Up"]
    return f"I follow the plan. </think><answer>{' || '.join(plan[:actions])}</answer>"


def runs_of_ones(mask):
    spans, start = [], None
    for i, bit in enumerate([*mask, 0]):
        if bit and start is None:
            start = i
        elif not bit and start is not None:
            spans.append((start, i))
            start = None
    return spans


def play(tokenizer, policy, env="sokoban", seeds=(0,), env_config=None, **config):
    engine = RolloutEngine(tokenizer, RolloutConfig(**config))
    specs = [EpisodeSpec(env, seed, env_config or {}) for seed in seeds]
    return engine.run(specs, ScriptedPolicy(policy, tokenizer))


class TestTokenLayout:
    def test_ids_equal_the_chat_template_rendering_of_the_whole_conversation(self, tiny_tokenizer):
        (episode,) = play(tiny_tokenizer, solver_reply, max_turns=3)
        assert episode.turns >= 2, "the layout must cover at least one feedback block"
        # The assistant messages hold "<think>" + reply, as the model saw them; rendering the conversation with the
        # chat template and tokenising it gives exactly prompt + completion (+ the template's trailing newline).
        rendered = tiny_tokenizer.apply_chat_template(episode.messages, tokenize=False)
        expected = tiny_tokenizer.encode(rendered, add_special_tokens=False)
        ids = episode.prompt_ids + episode.completion_ids
        assert expected[: len(ids)] == ids
        assert tiny_tokenizer.decode(expected[len(ids) :]) == "\n"

    def test_mask_is_zero_exactly_over_feedback(self, tiny_tokenizer):
        (episode,) = play(tiny_tokenizer, solver_reply, max_turns=3)
        assert len(episode.env_mask) == len(episode.completion_ids)
        assert runs_of_ones(episode.env_mask) == episode.turn_spans
        eos = tiny_tokenizer.eos_token_id
        for _, end in episode.turn_spans:
            assert episode.completion_ids[end - 1] == eos, "every reply ends with the model's own EOS"
        for (_, end), (next_start, _) in zip(episode.turn_spans, episode.turn_spans[1:], strict=False):
            feedback = tiny_tokenizer.decode(episode.completion_ids[end:next_start])
            assert feedback.startswith("\n<|im_start|>user\nReward:\n")
            assert feedback.endswith("<|im_end|>\n<|im_start|>assistant\n<think>")

    def test_prompt_is_primed_with_think(self, tiny_tokenizer):
        (episode,) = play(tiny_tokenizer, solver_reply, max_turns=1)
        text = tiny_tokenizer.decode(episode.prompt_ids)
        assert text.startswith("<|im_start|>system\nYou're a helpful assistant. You are playing Sokoban.")
        assert text.endswith("You have 10 actions left. Always output: <think> [Your thoughts] </think> <answer> "
                             "[your answer] </answer> with no extra text. Strictly follow this format. Max response "
                             "length: 120 words (tokens).<|im_end|>\n<|im_start|>assistant\n<think>")  # fmt: skip


class TestRewards:
    def test_solver_return_is_the_sum_of_sokoban_rewards(self, tiny_tokenizer):
        (episode,) = play(tiny_tokenizer, solver_reply, max_turns=10)
        moves = episode.actions_valid
        assert episode.success and episode.format_errors == 0
        # -0.1 per move, +1 when the box lands on its target, +10 when solved (one box)
        assert episode.total_return == pytest.approx(-0.1 * moves + 11)
        assert episode.total_return == pytest.approx(sum(episode.turn_rewards))
        assert episode.turns == -(-moves // 2)  # two moves per turn

    def test_unparseable_reply_costs_the_penalty_and_keeps_the_state(self, tiny_tokenizer):
        (episode,) = play(tiny_tokenizer, lambda e: "no tags here", max_turns=3)
        assert episode.turn_rewards == [pytest.approx(-0.1)] * 3
        assert episode.format_errors == 3 and episode.actions_total == 0
        start_state = episode.messages[1]["content"].split("State:\n")[1].split("\nYou have")[0]
        last_state = episode.messages[-2]["content"].split("State:\n")[1].split("\nYou have")[0]
        assert start_state == last_state

    def test_invalid_action_penalised_once_and_valid_ones_still_run(self, tiny_tokenizer):
        (episode,) = play(tiny_tokenizer, lambda e: "x</think><answer>Jump || Up</answer>", max_turns=1)
        assert episode.actions_total == 2 and episode.actions_valid == 1
        # Up costs -0.1 as a move; the rejected "Jump" adds the -0.1 format penalty once
        assert episode.turn_rewards == [pytest.approx(-0.2)]

    def test_actions_per_turn_and_episode_budget(self, tiny_tokenizer):
        reply = "x</think><answer>Up || Down || Up || Down</answer>"
        (episode,) = play(
            tiny_tokenizer, lambda e: reply, max_turns=5, max_actions_per_turn=2, max_actions_per_episode=3
        )
        assert episode.actions_total == 3, "2 in turn 1, then only the 1 action left"
        assert episode.turns == 2

    def test_single_turn_countdown(self, tiny_tokenizer):
        (episode,) = play(tiny_tokenizer, lambda e: "x</think><answer>1 + 1</answer>", env="countdown", max_turns=1)
        assert episode.turns == 1 and episode.finished
        assert episode.total_return in (0.0, 0.1, 1.0)


class TestBudgets:
    def test_token_budget_ends_the_rollout_after_a_complete_turn(self, tiny_tokenizer):
        (episode,) = play(tiny_tokenizer, solver_reply, max_turns=5, max_completion_tokens=60)
        assert episode.context_limited
        assert len(episode.completion_ids) <= 60
        assert episode.env_mask[-1] == 1, "no dangling feedback after the last reply"

    def test_reply_cut_at_the_turn_limit_is_closed_by_masked_eos(self, tiny_tokenizer):
        long_reply = "thinking " * 40 + "</think><answer>Up</answer>"
        (episode,) = play(tiny_tokenizer, lambda e: long_reply, max_turns=2, max_tokens_per_turn=10)
        first_end = episode.turn_spans[0][1]
        assert episode.turn_spans[0] == (0, 10)
        assert episode.completion_ids[first_end] == tiny_tokenizer.eos_token_id
        assert episode.env_mask[first_end] == 0
        assert episode.format_errors == 2  # the cut replies never reach </answer>


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    reply=st.one_of(
        st.text(max_size=300),
        st.sampled_from(
            ["", "<think>", "</think><answer>", "<answer>||||</answer>", "</think><answer>" + "|| " * 200]
        ),
        st.text(alphabet="<>/|thinkswerUpDownLeftRight ", max_size=200),
    ),
    env=st.sampled_from(["sokoban", "frozen_lake", "countdown", "metamathqa"]),
)
def test_arbitrary_model_output_never_breaks_a_rollout(tiny_tokenizer, reply, env):
    (episode,) = play(tiny_tokenizer, lambda e: reply, env=env, max_turns=2)
    assert len(episode.turn_rewards) == episode.turns >= 1
    for reward in episode.turn_rewards:
        assert reward == reward  # not NaN
    if episode.format_errors == episode.turns:
        assert all(r == pytest.approx(-0.1) for r in episode.turn_rewards)
        assert episode.actions_valid == 0


def test_aggregate_env_metrics():
    stats = [
        ("sokoban", {"success": 1.0, "return": 10.0, "turns": 2.0, "valid_actions": 3.0, "actions": 4.0,
                     "format_errors": 0.0, "env_errors": 1.0, "context_limited": 0.0}),
        ("sokoban", {"success": 0.0, "return": -0.5, "turns": 4.0, "valid_actions": 1.0, "actions": 4.0,
                     "format_errors": 2.0, "env_errors": 0.0, "context_limited": 1.0}),
    ]  # fmt: skip
    metrics = aggregate_env_metrics(stats)
    assert metrics == {
        "sokoban/success_rate": 0.5,
        "sokoban/mean_return": 4.75,
        "sokoban/turns": 3.0,
        "sokoban/context_limit_rate": 0.5,
        "sokoban/valid_action_rate": 0.5,
        "sokoban/format_error_rate": 2 / 6,
        "sokoban/env_error_rate": 1 / 8,  # pooled: 1 failed action of 8 attempted
    }


def test_mixed_environment_batches_also_log_the_pooled_metrics():
    from trl_ragen2.agents.rollout_func import log_env_metrics

    class Accelerator:
        num_processes = 1

    class Trainer:
        accelerator = Accelerator()
        _metrics = {"train": __import__("collections").defaultdict(list)}

    episodes = []
    for env, success in (("sokoban", True), ("countdown", False), ("countdown", False)):
        episode = RolloutEngine.__new__(RolloutEngine)  # only the fields stats() reads are needed
        episode = type("E", (), {})()
        episode.spec = EpisodeSpec(env, 0)
        episode.stats = lambda success=success: {"success": float(success), "return": 1.0, "turns": 1.0,
                                                 "valid_actions": 1.0, "actions": 1.0, "format_errors": 0.0,
                                                 "context_limited": 0.0}  # fmt: skip
        episodes.append(episode)
    metrics = log_env_metrics(Trainer(), episodes, "train")
    assert metrics["sokoban/success_rate"] == 1.0 and metrics["countdown/success_rate"] == 0.0
    assert metrics["all/success_rate"] == pytest.approx(1 / 3)
    assert Trainer._metrics["train"]["ragen2/env/all/success_rate"] == [pytest.approx(1 / 3)]


def fake_trainer():
    """What `log_env_metrics` reads of a trainer: one process, and the metrics store."""
    from collections import defaultdict

    return SimpleNamespace(accelerator=SimpleNamespace(num_processes=1), _metrics={"train": defaultdict(list)})


def episode_with(env, stats):
    return SimpleNamespace(spec=EpisodeSpec(env, 0), stats=lambda: stats)


def rollout_stats(success):
    return {"success": float(success), "return": 1.0, "turns": 1.0, "valid_actions": 1.0, "actions": 2.0,
            "format_errors": 0.0, "env_errors": 0.0, "context_limited": 0.0}  # fmt: skip


class TestEnvironmentEpisodeMetrics:
    """An environment's own per-episode numbers (`TextEnv.episode_metrics`) beside the rollout's statistics."""

    def test_an_extra_key_averages_over_episodes_and_leaves_the_rollout_metrics_unchanged(self):
        plain = [("sokoban", rollout_stats(True)), ("sokoban", rollout_stats(False))]
        extra = [
            ("sokoban", {**rollout_stats(True), "level": 3.0}),
            ("sokoban", {**rollout_stats(False), "level": 0.0}),
        ]
        metrics = aggregate_env_metrics(extra)
        assert metrics == {**aggregate_env_metrics(plain), "sokoban/level": 1.5}
        assert metrics["sokoban/success_rate"] == 0.5 and metrics["sokoban/valid_action_rate"] == 0.5

    def test_a_mixed_batch_logs_the_extra_key_only_for_the_environment_that_reports_it(self):
        trainer = fake_trainer()
        episodes = [
            episode_with("deepcoder", {**rollout_stats(True), "isolation_level": 3.0}),
            episode_with("deepcoder", {**rollout_stats(False), "isolation_level": 2.0}),
            episode_with("countdown", rollout_stats(False)),
        ]
        metrics = log_env_metrics(trainer, episodes, "train")
        assert metrics["deepcoder/isolation_level"] == 2.5
        assert [key for key in metrics if key.endswith("isolation_level")] == ["deepcoder/isolation_level"]
        assert metrics["deepcoder/success_rate"] == 0.5 and metrics["all/success_rate"] == pytest.approx(1 / 3)
        assert trainer._metrics["train"]["ragen2/env/deepcoder/isolation_level"] == [2.5]
        assert len(metrics) == 3 * 7 + 1  # the seven rollout metrics for deepcoder, countdown and all, + one

    @pytest.mark.parametrize("key", ["success", "env_errors", "turns", "success_rate", "mean_return"])
    def test_an_environment_metric_named_like_a_rollout_statistic_is_refused(self, tiny_tokenizer, monkeypatch, key):
        from trl_ragen2_envs.sokoban import SokobanEnv

        class ClashingSokoban(SokobanEnv):
            episode_metric_keys = (key,)

            def episode_metrics(self):
                return {key: 1.0}

        monkeypatch.setattr("trl_ragen2.agents.rollout.make_env", lambda name, **config: ClashingSokoban())
        message = (
            rf"ClashingSokoban.episode_metrics\(\) returned the key '{key}', which the rollout's own statistics use"
        )
        with pytest.raises(ValueError, match=message):
            play(tiny_tokenizer, solver_reply, max_turns=1)

    @pytest.mark.parametrize("key", ["success_rate", "mean_return", "context_limit_rate"])
    def test_statistics_holding_a_rollout_metric_name_are_refused(self, key):
        """A key that would overwrite one of the aggregated metrics (`<env>/<key>`) is refused there too."""
        with pytest.raises(ValueError, match=f"the episode statistics of 'sokoban' returned the key '{key}'"):
            aggregate_env_metrics([("sokoban", {**rollout_stats(True), key: 1.0})])

    @pytest.mark.parametrize(
        ("returned", "message"),
        [
            (
                {"level": 1.0, "other": 2.0},
                r"returned the keys \['level', 'other'\], but LeveledSokoban.episode_metric_keys declares \['level'\]",
            ),
            ({}, r"returned the keys \[\], but"),
            ({"level": float("nan")}, "returned level=nan; episode metrics must be finite numbers"),
            ({"level": "3"}, "returned level='3'"),
            ({"a/b": 1.0}, "returned the key 'a/b'; keys must be non-empty names without '/'"),
        ],
    )
    def test_undeclared_keys_and_non_numbers_are_refused(self, tiny_tokenizer, monkeypatch, returned, message):
        from trl_ragen2_envs.sokoban import SokobanEnv

        class LeveledSokoban(SokobanEnv):
            episode_metric_keys = ("level",)

            def episode_metrics(self):
                return returned

        monkeypatch.setattr("trl_ragen2.agents.rollout.make_env", lambda name, **config: LeveledSokoban())
        with pytest.raises(ValueError, match=message):
            play(tiny_tokenizer, solver_reply, max_turns=1)

    def test_a_declared_metric_reaches_the_episode_stats(self, tiny_tokenizer, monkeypatch):
        from trl_ragen2_envs.sokoban import SokobanEnv

        class LeveledSokoban(SokobanEnv):
            episode_metric_keys = ("level",)

            def episode_metrics(self):
                return {"level": 7}  # an int: logged as a float

        monkeypatch.setattr("trl_ragen2.agents.rollout.make_env", lambda name, **config: LeveledSokoban())
        (episode,) = play(tiny_tokenizer, solver_reply, max_turns=1)
        stats = episode.stats()
        assert stats["level"] == 7.0 and type(stats["level"]) is float
        assert list(stats) == [*ROLLOUT_STAT_KEYS, "level"]


def test_evaluate_scripted_solver_on_validation_seeds(tiny_tokenizer):
    engine = RolloutEngine(tiny_tokenizer, RolloutConfig(max_turns=10))
    result = evaluate_episodes(
        engine, ScriptedPolicy(solver_reply, tiny_tokenizer), build_rows("sokoban", "validation", 4)
    )
    assert result["metrics"]["sokoban/success_rate"] == 1.0
    assert result["metrics"]["sokoban/valid_action_rate"] == 1.0
    assert len(result["episodes"]) == 4


# ---------------------------------------------------------------------------------------------------------------
# TRL integration


def script_turns(trainer, replies):
    """Replace the trainer's generation: row i of every call gets replies[i % len(replies)] (+ EOS)."""
    tokenizer = trainer.processing_class
    calls = []

    def generate(prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        calls.append((len(prompt_ids), num_generations))
        out = [tokenizer.encode(replies[i % len(replies)], add_special_tokens=False) + [tokenizer.eos_token_id]
               for i in range(len(prompt_ids))]  # fmt: skip
        return out, None

    trainer._generate_single_turn = generate
    return calls


def trainer_args(tmp_path, cls=SNRFilteredGRPOConfig, **overrides):
    values = dict(output_dir=str(tmp_path), per_device_train_batch_size=8, num_generations=4, max_completion_length=512,
                  max_steps=2, learning_rate=1e-2, bf16=False, use_cpu=True, gradient_checkpointing=False,
                  logging_steps=1, report_to="none", save_strategy="no")  # fmt: skip
    values.update(overrides)
    return cls(**values)


def test_sokoban_training_with_the_filter(tmp_path, tiny_tokenizer):
    """End to end: RAGEN rollouts feed SNRFilteredGRPOTrainer; groups share seeds; feedback is masked."""
    dataset = Dataset.from_list(build_rows("sokoban", "train", 8))
    rollout = RagenRollout(RolloutConfig(max_turns=2))
    trainer = SNRFilteredGRPOTrainer(
        model=make_tiny_model(tiny_tokenizer), reward_funcs=env_return, args=trainer_args(tmp_path),
        train_dataset=dataset, processing_class=tiny_tokenizer, rollout_func=rollout,
    )  # fmt: skip
    # Rollouts 0-1 of each group move, 2-3 babble: every group has return variance.
    calls = script_turns(trainer, ["go</think><answer>Up || Left</answer>", "go</think><answer>Down</answer>",
                                   "babble", "babble"])  # fmt: skip
    seen_batches = []
    compute_loss = trainer._compute_loss

    def recording_loss(model, inputs):
        seen_batches.append(inputs)
        return compute_loss(model, inputs)

    trainer._compute_loss = recording_loss
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()

    assert calls[0] == (8, 4), "turn 1 is generated in one batch with the group size"
    assert all(n == 8 and g == 1 for n, g in calls[1:2]), "later turns: one batch over the active rollouts"
    episodes = rollout.last_episodes
    for group in range(2):
        prompts = {tuple(e.prompt_ids) for e in episodes[4 * group : 4 * group + 4]}
        assert len(prompts) == 1, "the G rollouts of a group play the same instance"
    assert episodes[0].prompt_ids != episodes[4].prompt_ids
    logs = trainer.state.log_history[0]
    assert logs["ragen2/env/sokoban/format_error_rate"] == pytest.approx(0.5)
    assert logs["ragen2/filter/kept_groups"] >= 1
    batch = seen_batches[0]
    assert "tool_mask" in batch and (batch["tool_mask"] == 0).any(), "feedback tokens are masked from the loss"
    assert any(not torch.equal(before[n], p) for n, p in trainer.model.named_parameters())


def test_plain_grpo_trainer_with_rollout_func(tmp_path, tiny_tokenizer):
    rows = build_rows("frozen_lake", "train", 4)
    dataset = Dataset.from_list(rows)
    rollout = RagenRollout(RolloutConfig(max_turns=2), datasets=[rows])
    trainer = GRPOTrainer(
        model=make_tiny_model(tiny_tokenizer), reward_funcs=env_return,
        args=trainer_args(tmp_path, GRPOConfig, max_steps=1), train_dataset=dataset, processing_class=tiny_tokenizer,
        rollout_func=rollout,
    )  # fmt: skip
    script_turns(trainer, ["x</think><answer>Left</answer>", "nothing"])
    trainer.train()
    assert "ragen2/env/frozen_lake/success_rate" in trainer.state.log_history[0]


def test_unknown_prompt_with_plain_trainer_explains_the_fix(tmp_path, tiny_tokenizer):
    rollout = RagenRollout()

    class FakeTrainer:
        generation_rows = None

    with pytest.raises(ValueError, match="pass the datasets to the rollout"):
        rollout._rows_for([[{"role": "user", "content": "?"}]], FakeTrainer())


def test_row_without_env_names_the_fix():
    with pytest.raises(ValueError, match="build_rows"):
        EpisodeSpec.from_row({"prompt": "x", "seed": 1})


def test_environment_turn_cap_ends_episodes(tiny_tokenizer):
    (episode,) = play(
        tiny_tokenizer, lambda e: "x</think><answer>search[red shoes]</answer>", env="webshop",
        env_config={"procedural": True, "procedural_products": 50, "max_turns": 2}, max_turns=5, max_actions_per_turn=1,
    )  # fmt: skip
    assert episode.turns == 2, "WebShop's own max_turns caps the rollout's"

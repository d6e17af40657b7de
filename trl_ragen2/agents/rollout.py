"""Multi-turn agent rollouts in the RAGEN protocol: the turn loop over a batch of environment episodes.

One episode is a chat. The prompt is the system message ("You're a helpful assistant. " + the env's instructions)
and the turn-1 user message, rendered with the tokenizer's chat template and primed with `<think>`. Each turn the
model's reply is parsed as `<think>...</think><answer>...</answer>`; the answer's `||`-separated actions (at most
`max_actions_per_turn`) are stepped in the environment. The environment's reward comes back in the next user
message ("Reward:\\n{r}\\n" + the next turn prompt). Penalties follow `RolloutConfig.protocol`:

- `"trl_ragen2"`: a reply that does not parse, or any action the environment rejects, adds the format penalty
  (-0.1) once for that turn; rejected actions leave the state unchanged and do not use up the budget.
- `"ragen"` (RAGEN's EnvStateManager): every parsed action is checked against the environment's action
  vocabulary first (free-form environments accept every action); the turn is penalised once when a parsed action
  is not in it or none is, also when the action that ends the episode or the action budget comes before it. Then
  the valid actions, cut to the actions left, run until the episode ends. A turn without a valid action puts
  RAGEN's warning line into the next user message.

Token layout of one rollout (never re-tokenised):

    prompt_ids      = template(system, user turn 1) + "<think>"
    completion_ids  = reply_1 | feedback_1 | reply_2 | feedback_2 | ... | reply_T
    env_mask        =  1...1  |   0...0    |  1...1  |    0...0   | ... |  1...1

`reply_t` are the generated token ids exactly as sampled; `feedback_t` is the chat template's own rendering of the
end of the assistant turn, the next user message and the next generation prefix (+ `<think>`). The trajectory
return is the sum of the turns' environment rewards and penalties. Hitting the token budget ends a rollout
cleanly after its last complete turn.

The loop is generation-backend agnostic (`trl_ragen2.agents.generation`): every turn is one batched call over all
active episodes, and with several processes every process makes the same number of calls.
"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tqdm.auto import tqdm

from trl_ragen2_envs import make_env
from trl_ragen2_envs.datasets import parse_env_config, row_seed
from trl_ragen2_envs.prompts import (
    THINK_OPEN,
    check_protocol,
    initial_messages,
    parse_response,
    prompt_budget,
    reward_feedback,
    turn_prompt,
)


@dataclass
class RolloutConfig:
    """Settings of the RAGEN turn loop.

    Args:
        max_turns (`int`, defaults to `5`):
            Turns per episode (RAGEN: 5 for Sokoban and FrozenLake, 9 for WebShop, 1 for Countdown). An
            environment with a `max_turns` attribute caps its episodes further.
        max_actions_per_turn (`int`, defaults to `2`):
            Actions executed from one answer (RAGEN: 2 for Sokoban and FrozenLake, 1 elsewhere).
        max_actions_per_episode (`int`, *optional*):
            Action budget of an episode, shown as "You have k actions left". Defaults to RAGEN's per environment
            (`trl_ragen2_envs.prompts.RAGEN_PROMPT_BUDGETS`: 10 for Sokoban and FrozenLake).
        prompt_max_tokens (`int`, *optional*):
            The "Max response length" stated in the prompt; defaults to RAGEN's per environment.
        max_tokens_per_turn (`int`, defaults to `400`):
            Generation limit of one reply (RAGEN: 400).
        max_completion_tokens (`int`, *optional*):
            Token budget of the whole completion (replies and feedback). The trainer integration sets it to
            `max_completion_length`. `None`: unlimited.
        format_penalty (`float`, defaults to `-0.1`):
            Added to the return once per turn whose reply does not parse or holds a rejected action.
        think_prefix (`str`, defaults to `"<think>"`):
            Text that primes every generation (appended to the generation prompt).
        eval_temperature (`float`, *optional*):
            Sampling temperature of evaluation rollouts (RAGEN validates at 0.5); `None` keeps the trainer's.
        protocol (`str`, defaults to `"trl_ragen2"`):
            `"ragen"`: RAGEN's prompts, feedback and penalty rules to the character (see the module docstring and
            `trl_ragen2_envs.prompts`); the paper's recipe configs use it. `"trl_ragen2"`: this library's rules,
            which also penalise actions that a free-form environment (WebShop, SearchQA) rejects.
    """

    max_turns: int = 5
    max_actions_per_turn: int = 2
    max_actions_per_episode: int | None = None
    prompt_max_tokens: int | None = None
    max_tokens_per_turn: int = 400
    max_completion_tokens: int | None = None
    format_penalty: float = -0.1
    think_prefix: str = THINK_OPEN
    eval_temperature: float | None = None
    protocol: str = "trl_ragen2"

    def __post_init__(self):
        check_protocol(self.protocol, "RolloutConfig.protocol")
        for name in ("max_turns", "max_actions_per_turn", "max_tokens_per_turn"):
            _check_count(name, getattr(self, name), optional=False)
        for name in ("max_actions_per_episode", "prompt_max_tokens", "max_completion_tokens"):
            _check_count(name, getattr(self, name), optional=True)
        penalty = self.format_penalty
        if isinstance(penalty, bool) or not isinstance(penalty, (int, float)) or not math.isfinite(penalty):
            raise ValueError(
                f"RolloutConfig.format_penalty must be a finite number, got {penalty!r}; RAGEN uses -0.1 (0 disables it)"
            )
        if not isinstance(self.think_prefix, str):
            raise ValueError(
                f"RolloutConfig.think_prefix must be text, got {self.think_prefix!r} "
                f"({type(self.think_prefix).__name__}); RAGEN primes replies with '<think>' ('' for none)"
            )
        temperature = self.eval_temperature
        if temperature is not None and (
            isinstance(temperature, bool)
            or not isinstance(temperature, (int, float))
            or not 0 < temperature < math.inf
        ):
            raise ValueError(
                f"RolloutConfig.eval_temperature must be a positive number or None, got {temperature!r}; RAGEN "
                "validates at 0.5, and None keeps the trainer's temperature"
            )


def _check_count(name: str, value: Any, *, optional: bool) -> None:
    """A `ValueError` naming the `RolloutConfig` field unless `value` is an integer >= 1 (or None if `optional`)."""
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        allowed = "an integer >= 1 or None (RAGEN's default)" if optional else "an integer >= 1"
        raise ValueError(
            f"RolloutConfig.{name} must be {allowed}, got {value!r} ({type(value).__name__}); see the RolloutConfig "
            "docstring for RAGEN's values"
        )


@dataclass(frozen=True)
class EpisodeSpec:
    """What identifies an episode: the environment, its constructor keywords and the seed."""

    env: str
    seed: int
    env_config: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> EpisodeSpec:
        """Read `env`, `seed` and `env_config` from a dataset row (see `trl_ragen2_envs.datasets.build_rows`)."""
        missing = [key for key in ("env", "seed") if key not in row or row[key] is None]
        if missing:
            raise ValueError(
                f"dataset row is missing {missing}: rows for the RAGEN rollout need 'env', 'seed' and optionally "
                "'env_config'; build them with trl_ragen2_envs.datasets.build_rows"
            )
        return cls(env=str(row["env"]), seed=row_seed(row["seed"]), env_config=parse_env_config(row.get("env_config")))


# The numbers `Episode.stats()` counts itself, and the per-environment metrics `aggregate_env_metrics` builds
# from them; an environment's own episode metrics (`TextEnv.episode_metrics`) may use neither name.
ROLLOUT_STAT_KEYS = (
    "success",
    "return",
    "turns",
    "valid_actions",
    "actions",
    "format_errors",
    "env_errors",
    "context_limited",
)
ENV_METRICS = (
    "success_rate",
    "valid_action_rate",
    "format_error_rate",
    "env_error_rate",
    "turns",
    "mean_return",
    "context_limit_rate",
)


def check_episode_metrics(metrics: Any, source: str) -> dict[str, float]:
    """`metrics` (an environment's own numbers about one episode, from `source`) as floats, or a `ValueError`.

    Keys are non-empty names without "/" that neither `ROLLOUT_STAT_KEYS` nor `ENV_METRICS` use (they would
    overwrite the rollout's own statistics); values are finite real numbers.
    """
    if not isinstance(metrics, dict):
        raise ValueError(f"{source} must return a dict of name -> number, got {type(metrics).__name__}")
    checked = {}
    for key, value in metrics.items():
        if not isinstance(key, str) or not key or "/" in key:
            raise ValueError(f"{source} returned the key {key!r}; keys must be non-empty names without '/'")
        if key in ROLLOUT_STAT_KEYS or key in ENV_METRICS:
            raise ValueError(
                f"{source} returned the key {key!r}, which the rollout's own statistics use "
                f"({', '.join(sorted({*ROLLOUT_STAT_KEYS, *ENV_METRICS}))}); give the environment's metric another name"
            )
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
            raise ValueError(f"{source} returned {key}={value!r}; episode metrics must be finite numbers")
        checked[key] = float(value)
    return checked


def read_episode_metrics(env: Any) -> dict[str, float]:
    """The environment's own numbers about the episode it just played (`TextEnv.episode_metrics`), checked: the
    keys must be the ones it declares in `episode_metric_keys`."""
    source = f"{type(env).__name__}.episode_metrics()"
    if not hasattr(env, "episode_metrics"):  # not a TextEnv: nothing beyond the rollout's own statistics
        return {}
    metrics = check_episode_metrics(env.episode_metrics(), source)
    declared = tuple(getattr(env, "episode_metric_keys", ()))
    if sorted(metrics) != sorted(declared):
        raise ValueError(
            f"{source} returned the keys {sorted(metrics)}, but {type(env).__name__}.episode_metric_keys declares "
            f"{sorted(declared)}; return exactly the declared keys (docs/metrics.md lists them)"
        )
    return metrics


@dataclass
class Episode:
    """One rollout: its environment, token layout, spans and statistics."""

    spec: EpisodeSpec
    env: Any
    messages: list[dict[str, str]]
    prompt_ids: list[int]
    actions_left: int
    prompt_max_tokens: int
    completion_ids: list[int] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)
    logprobs: list[float] | None = field(default_factory=list)
    turn_spans: list[tuple[int, int]] = field(default_factory=list)  # model tokens of each turn, in completion_ids
    turn_rewards: list[float] = field(default_factory=list)  # environment reward + penalty, per turn
    observation: str = ""
    no_valid_action: bool = False  # the last turn ran no action ("ragen" shows a warning line next)
    turns: int = 0
    total_return: float = 0.0
    reward_sum: float = 0.0  # environment rewards alone, summed turn by turn
    penalty_sum: float = 0.0  # format penalties alone
    actions_valid: int = 0
    actions_total: int = 0
    format_errors: int = 0
    env_errors: int = 0  # steps the environment's own machinery failed (info["env_error"], e.g. a search server down)
    success: bool = False
    finished: bool = False
    context_limited: bool = False
    env_metrics: dict[str, float] = field(default_factory=dict)  # the environment's own numbers, read at the end

    def stats(self) -> dict[str, float]:
        """Per-episode numbers behind the `ragen2/env/<env>/...` metrics: the rollout's own (`ROLLOUT_STAT_KEYS`),
        then the environment's (`env_metrics`, from `TextEnv.episode_metrics`)."""
        return {
            "success": float(self.success),
            "return": self.total_return,
            "turns": float(self.turns),
            "valid_actions": float(self.actions_valid),
            "actions": float(self.actions_total),
            "format_errors": float(self.format_errors),
            "env_errors": float(self.env_errors),
            "context_limited": float(self.context_limited),
            **check_episode_metrics(self.env_metrics, "Episode.env_metrics"),
        }


# ---------------------------------------------------------------------------------------------------------------
# Chat-template rendering


def render_prompt_ids(tokenizer, messages, think_prefix: str, chat_template_kwargs: dict | None = None) -> list[int]:
    """Token ids of `messages` rendered for generation, primed with `think_prefix`."""
    text = tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True, **(chat_template_kwargs or {})
    )
    return tokenizer.encode(text + think_prefix, add_special_tokens=False)


def feedback_ids(tokenizer, user_content: str, think_prefix: str, chat_template_kwargs: dict | None = None):
    """Ids that close an assistant turn and open the next one, exactly as the chat template renders them.

    A dummy conversation is rendered with and without a next user message; the difference, starting right after
    the assistant's end-of-turn token (which the model generated itself), is the feedback. The template is rendered
    once per tokenizer with a placeholder message, and the real message is put in its place.
    """
    before, after = _feedback_template(tokenizer, json.dumps(chat_template_kwargs or {}, sort_keys=True))
    return tokenizer.encode(before + user_content + after + think_prefix, add_special_tokens=False)


_PLACEHOLDER = "\x00user message\x00"
_FEEDBACK_TEMPLATES: dict[tuple[int, str], tuple[str, str]] = {}


def _feedback_template(tokenizer, kwargs_key: str) -> tuple[str, str]:
    key = (id(tokenizer), tokenizer.chat_template or "", kwargs_key)
    if key not in _FEEDBACK_TEMPLATES:
        kwargs = json.loads(kwargs_key)
        dummy = [
            {"role": "system", "content": "S"},
            {"role": "user", "content": "U"},
            {"role": "assistant", "content": "A"},
        ]
        base = tokenizer.apply_chat_template(dummy, tokenize=False, **kwargs)
        full = tokenizer.apply_chat_template(
            [*dummy, {"role": "user", "content": _PLACEHOLDER}], tokenize=False, add_generation_prompt=True, **kwargs
        )
        if not full.startswith(base) or full.count(_PLACEHOLDER) != 1:
            raise ValueError(
                "the chat template is not prefix-preserving (rendering a conversation changes how earlier turns "
                "look), so multi-turn token ids cannot be kept exact; use a template that keeps earlier turns "
                "unchanged (e.g. TRL's qwen2_5, or the model's *_training template from trl/chat_templates)"
            )
        end_of_turn = base.rfind(tokenizer.eos_token)
        if end_of_turn < 0:
            raise ValueError(
                f"the chat template does not end assistant turns with the EOS token {tokenizer.eos_token!r}; set "
                "the tokenizer's eos_token to the template's end-of-turn marker"
            )
        suffix = base[end_of_turn + len(tokenizer.eos_token) :] + full[len(base) :]
        before, after = suffix.split(_PLACEHOLDER)
        _FEEDBACK_TEMPLATES[key] = (before, after)
    return _FEEDBACK_TEMPLATES[key]


# ---------------------------------------------------------------------------------------------------------------
# The turn loop

# (prompt ids of the active episodes, max new tokens, episodes, group size, pad_to) -> (reply ids, logprobs or None)
GenerateFn = Callable[..., tuple[list[list[int]], list[list[float]] | None]]


class RolloutEngine:
    """Runs batches of episodes through a generation backend.

    Args:
        tokenizer: The policy's tokenizer (with a chat template).
        config (`RolloutConfig`): Turn-loop settings.
        chat_template_kwargs (`dict`, *optional*): Passed to `apply_chat_template` (e.g. `enable_thinking`).
        max_active_across_processes (`Callable[[int], int]`, *optional*): Returns the largest number of active
            episodes over all processes; each process keeps calling the backend until that is 0, so collective
            generation (vLLM server, ZeRO-3) never waits on a process that stopped early.
        show_progress (`bool`, defaults to `False`): Show a progress bar over the turns of each batch.
    """

    def __init__(self, tokenizer, config: RolloutConfig | None = None, *, chat_template_kwargs=None,
                 max_active_across_processes: Callable[[int], int] | None = None, show_progress: bool = False):  # fmt: skip
        self.tokenizer = tokenizer
        self.config = config or RolloutConfig()
        self.chat_template_kwargs = chat_template_kwargs or {}
        self.max_active_across_processes = max_active_across_processes or (lambda count: count)
        self.eos_token_id = tokenizer.eos_token_id
        self.show_progress = show_progress

    def start(self, spec: EpisodeSpec) -> Episode:
        """Build and reset the episode's environment and render its first prompt."""
        env = make_env(spec.env, **spec.env_config)
        observation = env.reset(seed=spec.seed)
        actions, prompt_tokens = prompt_budget(
            spec.env, self.config.max_actions_per_episode, self.config.prompt_max_tokens
        )
        messages = initial_messages(
            env, observation, actions_left=actions, max_tokens=prompt_tokens, protocol=self.config.protocol
        )
        prompt_ids = render_prompt_ids(self.tokenizer, messages, self.config.think_prefix, self.chat_template_kwargs)
        return Episode(spec, env, messages, prompt_ids, actions, prompt_tokens, observation=observation)

    def run(self, specs: Sequence[EpisodeSpec], generate: GenerateFn, *, group_size: int = 1) -> list[Episode]:
        """Play every episode to its end. `group_size`: consecutive specs that are copies of one prompt (turn 1)."""
        episodes = [self.start(spec) for spec in specs]
        progress = tqdm(
            total=self.config.max_turns,
            desc="rollout turns",
            unit="turn",
            leave=False,
            disable=not self.show_progress or self.config.max_turns == 1,
        )
        for turn in range(1, self.config.max_turns + 1):
            active = [episode for episode in episodes if not episode.finished]
            most_active = self.max_active_across_processes(len(active))
            if most_active == 0:
                break
            progress.set_postfix(active=len(active))
            limits = [self._reply_limit(episode) for episode in active]
            replies, logprobs = generate(
                [episode.prompt_ids + episode.completion_ids for episode in active],
                max(limits, default=1),
                episodes=active,
                group_size=group_size if turn == 1 else 1,
                pad_to=most_active,
            )
            for index, episode in enumerate(active):
                reply = list(replies[index])[: limits[index]]
                reply_logprobs = None if logprobs is None else list(logprobs[index])[: len(reply)]
                self._play_turn(episode, turn, reply, reply_logprobs)
            progress.update()
        progress.close()
        for episode in episodes:
            episode.finished = True
            episode.env_metrics = read_episode_metrics(episode.env)
            episode.env.close()
        return episodes

    def _reply_limit(self, episode: Episode) -> int:
        if self.config.max_completion_tokens is None:
            return self.config.max_tokens_per_turn
        left = self.config.max_completion_tokens - len(episode.completion_ids)
        return max(1, min(self.config.max_tokens_per_turn, left))

    def _act(self, episode: Episode, text: str) -> tuple[float, bool, bool]:
        """The "trl_ragen2" rules: step the parsed actions (cut to the actions left) until one ends the episode.

        Returns `(environment reward, penalised, done)`; an unparsed reply or a rejected action is penalised.
        """
        parsed = parse_response(text, max_actions=min(self.config.max_actions_per_turn, episode.actions_left))
        env_reward, rejected, done = 0.0, not parsed.format_ok, False
        episode.format_errors += int(not parsed.format_ok)
        for action in parsed.actions:
            observation, reward, done, info = episode.env.step(action)
            episode.actions_total += 1
            episode.env_errors += bool(info.get("env_error"))
            if info.get("action_is_valid", True):
                episode.actions_valid += 1
                episode.actions_left -= 1
                env_reward += float(reward)
                episode.observation = observation
            else:
                rejected = True
            episode.success = episode.success or bool(info.get("success", False))
            if done:
                break
        return env_reward, rejected, done

    def _act_ragen(self, episode: Episode, text: str):
        """RAGEN's EnvStateManager rules: check every parsed action against the vocabulary, then step the valid
        ones, cut to the actions left, until one ends the episode.

        Returns `(environment reward, penalised, done)`. The reward is `0 + r_1 + ... + r_k` in the number types of
        RAGEN's environment (`TextEnv.protocol_reward`; RAGEN prints it so: `0` when nothing ran, FrozenLake's ints).
        Every action that runs uses up the budget.
        """
        parsed = parse_response(text, max_actions=self.config.max_actions_per_turn, protocol="ragen")
        episode.format_errors += int(not parsed.format_ok)
        vocabulary = episode.env.action_vocabulary()
        if vocabulary is None:  # free-form answers: RAGEN has no action table to check them against
            valid = list(parsed.actions)
        else:
            names = {name.lower() for name in vocabulary}
            valid = [action for action in parsed.actions if action.lower() in names]
        penalised = not valid or len(valid) != len(parsed.actions)
        episode.no_valid_action = not valid
        episode.actions_total += len(parsed.actions)
        episode.actions_valid += len(valid)
        env_reward, done = 0, False
        for action in valid[: episode.actions_left]:
            observation, reward, done, info = episode.env.step(action)
            episode.actions_left -= 1
            episode.actions_valid -= int(not info.get("action_is_valid", True))
            episode.env_errors += bool(info.get("env_error"))
            env_reward += episode.env.protocol_reward(reward, "ragen")
            episode.observation = observation
            episode.success = episode.success or bool(info.get("success", False))
            if done:
                break
        return env_reward, penalised, done

    def _play_turn(self, episode: Episode, turn: int, reply: list[int], logprobs: list[float] | None) -> None:
        config = self.config
        start = len(episode.completion_ids)
        episode.completion_ids.extend(reply)
        episode.env_mask.extend([1] * len(reply))
        if logprobs is None or episode.logprobs is None:
            episode.logprobs = None
        else:
            episode.logprobs.extend(logprobs + [0.0] * (len(reply) - len(logprobs)))
        episode.turn_spans.append((start, start + len(reply)))
        episode.turns = turn

        text = self.tokenizer.decode(reply, skip_special_tokens=True)
        episode.messages.append({"role": "assistant", "content": config.think_prefix + text})
        act = self._act_ragen if config.protocol == "ragen" else self._act
        env_reward, penalised, done = act(episode, text)
        penalty = config.format_penalty if penalised else 0.0
        turn_reward = env_reward + penalty
        episode.turn_rewards.append(turn_reward)
        episode.reward_sum += env_reward
        episode.penalty_sum += penalty
        if config.protocol == "ragen":  # RAGEN sums the environment rewards and the penalties apart
            episode.total_return = episode.reward_sum + episode.penalty_sum
        else:
            episode.total_return += turn_reward

        # an environment may cap its own episodes (WebShop: env.max_turns, RAGEN's 9)
        max_turns = min(config.max_turns, getattr(episode.env, "max_turns", config.max_turns))
        if done or turn >= max_turns or episode.actions_left <= 0:
            episode.finished = True
            return
        if config.protocol == "ragen":
            state = episode.env.protocol_observation(episode.observation, "ragen")
            user = reward_feedback(env_reward) + turn_prompt(
                turn + 1, state, episode.actions_left, episode.prompt_max_tokens, "ragen",
                no_valid_action=episode.no_valid_action,
            )  # fmt: skip
        else:
            user = reward_feedback(round(env_reward, 4)) + turn_prompt(
                turn + 1, episode.observation, episode.actions_left, episode.prompt_max_tokens
            )
        feedback = feedback_ids(self.tokenizer, user, config.think_prefix, self.chat_template_kwargs)
        if not reply or reply[-1] != self.eos_token_id:
            feedback = [self.eos_token_id, *feedback]  # the reply was cut at the limit: close the turn for it
        budget = config.max_completion_tokens
        if budget is not None and len(episode.completion_ids) + len(feedback) + 1 > budget:
            episode.finished, episode.context_limited = True, True
            return
        episode.messages.append({"role": "user", "content": user})
        episode.completion_ids.extend(feedback)
        episode.env_mask.extend([0] * len(feedback))
        if episode.logprobs is not None:
            episode.logprobs.extend([0.0] * len(feedback))

"""The metric names of trl-ragen2: every `ragen2/...` key it logs or reads, and the MI scopes those keys name.

A key is `ragen2/<group>/...`, one group per part of the method:

| Group | Written by | Key |
|---|---|---|
| [`FILTER`] | the SNR trainers, `EmptyStepGuard` | `ragen2/filter/<name>` |
| [`MI`] | the MI diagnostics, per scope of [`MI_SCOPES`] | `ragen2/mi/<scope>/<name>` |
| [`TEXT`] | the text template metrics, at the MI diagnostic steps | `ragen2/text/<name>` |
| [`ENV`] | the RAGEN rollout, per environment (and [`POOLED_ENV`]) | `ragen2/env/<env>/<metric>` |
| [`PPO`] | `SNRFilteredPPOTrainer` (critic and GAE) | `ragen2/ppo/<name>`, `ragen2/ppo/<name>/<stat>` |
| [`GRAD`] | the gradient SNR report | `ragen2/grad/bucket_<i>/<name>`, `ragen2/grad/time_s` |
| [`ALARM`] | `CollapseAlarm` | `ragen2/alarm/<name>` |

TRL logs what a trainer records in evaluation under `eval_` + the key ([`evaluation`]).

This module is the one place that spells these names: the writers and the readers (the run-log summary, the panels
and figures, the command line, the recipes' report) build their keys here, the leaf names of computed statistics
come from the functions that compute them (`filter_stats`, `mi_metric_keys`, `TEXT_KEYS`, `ALARM_KEYS`,
`BUCKET_KEYS`, the episode statistics), and `tests/test_docs.py` checks `docs/metrics.md` against both and fails
when another module of `trl_ragen2` spells a `ragen2/` key. It also names the sample log's file and the fields of
its records (`SAMPLE_*`, `docs/run_browser.md`), which are not metrics. Standard library only.
"""

EVAL_PREFIX = "eval_"  # TRL's prefix of every metric recorded in evaluation

# Which turns the MI diagnostics score (`trl_ragen2.collapse.scoring.pairs`); each scope logs ragen2/mi/<scope>/...
MI_SCOPES = ("first_turn", "trajectory")

FILTER = "ragen2/filter/"
MI = "ragen2/mi/"
TEXT = "ragen2/text/"
ENV = "ragen2/env/"
PPO = "ragen2/ppo/"
GRAD = "ragen2/grad/"
ALARM = "ragen2/alarm/"

POOLED_ENV = "all"  # ragen2/env/all/...: every episode of a mixed-environment batch together


def evaluation(key: str) -> str:
    """The name TRL logs `key` under when the trainer records it in evaluation."""
    return EVAL_PREFIX + key


def filter_key(name: str) -> str:
    """`ragen2/filter/<name>`: a statistic of `filter_stats`, or one of the `FILTER_*` keys below."""
    return FILTER + name


def mi_key(scope: str, name: str) -> str:
    """`ragen2/mi/<scope>/<name>`: an MI proxy, its uncertainty or a count, for one scope."""
    return f"{MI}{scope}/{name}"


def text_key(name: str) -> str:
    """`ragen2/text/<name>`: a text template metric of the batch's reasoning (`TEXT_KEYS`)."""
    return TEXT + name


def env_key(env: str, metric: str) -> str:
    """`ragen2/env/<env>/<metric>`: an episode statistic of one environment, or of all ([`POOLED_ENV`])."""
    return f"{ENV}{env}/{metric}"


def ppo_key(name: str) -> str:
    """`ragen2/ppo/<name>`: a critic or GAE metric (the `PPO_*` keys below)."""
    return PPO + name


def ppo_stat_key(name: str, stat: str) -> str:
    """`ragen2/ppo/<name>/<stat>`: a statistic (mean, std, min, max) of the GAE returns or advantages."""
    return f"{PPO}{name}/{stat}"


def grad_bucket_key(bucket: int, name: str) -> str:
    """`ragen2/grad/bucket_<i>/<name>`: a gradient norm, or the mean reward variance, of one bucket (1: lowest)."""
    return f"{GRAD}bucket_{bucket}/{name}"


def alarm_key(name: str) -> str:
    """`ragen2/alarm/<name>`: the collapse alarm's state (`ALARM_KEYS`)."""
    return ALARM + name


# The SNR filter: the statistics of `filter_stats` the readers show, then the trainers' own keys
FILTER_KEPT_FRACTION = filter_key("kept_fraction")
FILTER_KEPT_VARIANCE_SHARE = filter_key("kept_variance_share")
FILTER_KEPT_ROWS = filter_key("kept_rows")
FILTER_EMPTY = filter_key("empty")
FILTER_EMPTY_STEPS = filter_key("empty_steps")
FILTER_CONSECUTIVE_EMPTY_STEPS = filter_key("consecutive_empty_steps")
FILTER_LOSS_SCALE = filter_key("loss_scale")
FILTER_ACTIVE = filter_key("active")
FILTER_TOP_P = filter_key("top_p")
FILTER_AUTO_ON = filter_key("auto_on")
FILTER_AUTO_SIGNAL = filter_key("auto_signal")
FILTER_GUARD_ADDED = filter_key("guard_added")
FILTER_RULE_KEPT_GROUPS = filter_key("rule_kept_groups")  # with reward_variance_control: what the rule kept
FILTER_KEPT_ROLLOUT_FRACTION = filter_key("kept_rollout_fraction")  # "percentile_range" and "within_group" only
FILTER_ROLLOUTS_PER_GROUP = filter_key("rollouts_per_group")  # the per-group k of those two rules
FILTER_SCORING_ROWS_SKIPPED = filter_key("scoring_rows_skipped")
FILTER_SKIPPED_UPDATES = filter_key("skipped_updates")
# Dynamic sampling (reward_variance_refill): per generation step
FILTER_GENERATION_ROUNDS = filter_key("generation_rounds")  # rounds generated, the first included
FILTER_GROUPS_GENERATED_PER_KEPT = filter_key("groups_generated_per_kept")  # prompt groups made per group kept
FILTER_PROMPTS_CONSUMED = filter_key("prompts_consumed")  # prompts drawn from the training sampler so far
FILTER_REFILL_SECONDS = filter_key("refill_seconds")  # time spent generating and scoring the refill rounds

# PPO: the critic and GAE (`ppo_stat_key` adds the statistics of the returns and advantages)
PPO_KL = ppo_key("kl")
PPO_VALUE_LOSS = ppo_key("value_loss")
PPO_VALUE_CLIPFRAC = ppo_key("value_clipfrac")
PPO_CRITIC_LEARNING_RATE = ppo_key("critic_learning_rate")
PPO_CRITIC_GRAD_NORM = ppo_key("critic_grad_norm")
PPO_VALUES_MEAN = ppo_stat_key("values", "mean")
PPO_EXPLAINED_VARIANCE = ppo_key("explained_variance")

# The MI diagnostics' whole wall time at a step (both scopes, their intervals and the text metrics; the slowest process)
MI_TIME = MI + "time_s"

# The gradient SNR report's wall time (its per-bucket keys: `grad_bucket_key`)
GRAD_TIME = GRAD + "time_s"

# ---------------------------------------------------------------------------------------------------------------
# The sample log (`trl_ragen2.runs.samples`): its file, and the fields of its records (not metrics: no `ragen2/`)

SAMPLES_FILE = "samples.jsonl"  # beside metrics.jsonl in the output_dir
SAMPLES_VERSION = 1  # `version` of every record; a reader skips records of a newer version it does not know

# One record per sampled or diagnosed step: {"version", "step", "num_groups", "group_size", "groups", "mi"}
SAMPLE_STEP = "step"  # the optimizer step the batch trains (the step its metrics are logged under)
SAMPLE_NUM_GROUPS = "num_groups"  # prompt groups in the whole generation batch (the log holds at most N of them)
SAMPLE_GROUP_SIZE = "group_size"  # rollouts per group (num_generations)
SAMPLE_GROUPS = "groups"  # [{"index", "prompt", "rewards", "variance", "kept", "rollouts": [{"reward", "turns"}]}]
SAMPLE_MI = "mi"  # {scope: {"logp", "lengths", "target", "same", "chains", "rows", "contexts", "column_context"}}
SAMPLE_TURN_FIELDS = ("observation", "reasoning", "answer")  # a turn: what came before it, its reasoning, the rest

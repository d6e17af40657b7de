"""`SNRFilteredPPOConfig`: the SNR-filtered GRPO config plus a critic, GAE and the PPO value loss.

PPO reuses GRPOTrainer's generation, clipping and policy loss; only the advantage changes (per-token GAE from a
separate critic instead of the group-normalised reward), so this config is `SNRFilteredGRPOConfig` with the
critic and GAE fields added, paper defaults for PPO, and `num_generations=1` allowed (classic PPO, one rollout
per prompt, in which case there are no groups to filter).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from trl import GRPOConfig

from ..grpo.config_types import check_field_types
from ..grpo.grpo_config import SNRFilteredGRPOConfig


logger = logging.getLogger(__name__)


@dataclass
class SNRFilteredPPOConfig(SNRFilteredGRPOConfig):
    r"""
    Configuration class for [`SNRFilteredPPOTrainer`]: every [`SNRFilteredGRPOConfig`] field (TRL's
    [`~trl.GRPOConfig`] plus the RAGEN-2 filter fields of [`SNRFilterArguments`]), and the fields below.

    > RAGEN-2 PPO (arXiv 2604.06268, §4.1 and App. B.2; veRL's GAE estimator)

    Parameters:
        critic_model_name_or_path (`str` or `None`, *optional*, defaults to `None`):
            Path or Hub id of the critic, loaded as `AutoModelForTokenClassification` with `num_labels=1` (a causal
            LM checkpoint works: its backbone loads and the scalar head is new; a folder saved by this trainer under
            `output_dir/critic` reloads in full). `None` initialises the critic from the policy's weights, as the
            paper does. A model object can be passed to the trainer as `value_model=` instead.
        critic_learning_rate (`float`, *optional*, defaults to `1e-5`):
            Learning rate of the critic's optimizer (the paper: 1e-5; the actor's `learning_rate` is 1e-6). The
            critic uses the same optimizer type, betas, weight decay, schedule type, warmup and `max_grad_norm`
            as the policy.
        vf_coef (`float`, *optional*, defaults to `1.0`):
            Multiplier of the critic loss. The critic has its own optimizer, so this only rescales its gradients
            (with Adam it matters through `max_grad_norm` clipping and epsilon).
        cliprange_value (`float` or `None`, *optional*, defaults to `0.5`):
            Clip range of the value loss around the rollout-time values (veRL/RAGEN: 0.5; TRL's former
            PPOTrainer: 0.2). `None` disables value clipping.
        gamma (`float`, *optional*, defaults to `1.0`):
            GAE discount, in [0, 1], applied per model token (feedback tokens are skipped). Paper: 1.
        lam (`float`, *optional*, defaults to `1.0`):
            GAE lambda, in [0, 1]. Paper: 1.
        whiten_advantages (`bool`, *optional*, defaults to `True`):
            Normalise the GAE advantages to zero mean and unit variance over the model tokens of the whole
            (filtered) generation batch, across processes, as veRL's GAE estimator does.
        kl_in_reward (`bool`, *optional*, defaults to `False`):
            Put the KL to the reference model in the token rewards (`-beta * (logp - ref_logp)` on every model
            token, classic RLHF PPO) instead of adding `beta * KL` to the loss. Needs `beta > 0`. The paper's main
            tables use no KL at all (`beta=0`).
        use_turn_rewards (`bool`, *optional*, defaults to `False`):
            When the rollout gives each row `turn_spans` (token offsets of each assistant turn in the completion)
            and `turn_rewards` (one float per turn), pay each turn's reward on its last model token, and the rest of
            the trajectory return on the last model token. `False` puts the whole return on the last model token
            (RAGEN's default, `use_turn_scores=False`).

    Defaults that differ from [`~trl.GRPOConfig`], following the paper's PPO runs:

    - `epsilon_high=0.28` (clip 0.2 / 0.28), `entropy_coef=0.001`;
    - `scale_rewards="none"`: the group-normalised advantage is replaced by GAE, so reward scaling has no effect
      (any other value is reset to `"none"` with a warning).

    The paper's other PPO settings are TRL's defaults already: actor `learning_rate=1e-6`, `beta=0.0` (no KL in
    the main tables), `loss_type="dapo"` (token-mean, which the critic loss uses too).

    > [!NOTE]
    > `num_generations=1` (classic PPO: one rollout per prompt) is supported. The SNR filter needs prompt groups,
    > so it is then disabled with a warning; set `reward_variance_filtering=None` to silence it. GRPOConfig's own
    > checks still run, with the generation batch validated as if it held groups of its own size.
    """

    critic_model_name_or_path: str | None = field(
        default=None,
        metadata={"help": "Critic path or Hub id (token classification, num_labels=1); None copies the policy."},
    )
    critic_learning_rate: float = field(
        default=1e-5, metadata={"help": "Learning rate of the critic. Paper: 1e-5 (actor: 1e-6)."}
    )
    vf_coef: float = field(default=1.0, metadata={"help": "Multiplier of the critic (value) loss."})
    cliprange_value: float | None = field(
        default=0.5,
        metadata={"help": "Value-loss clip range around the rollout values (veRL: 0.5); None disables clipping."},
    )
    gamma: float = field(default=1.0, metadata={"help": "GAE discount per model token, in [0, 1]. Paper: 1."})
    lam: float = field(default=1.0, metadata={"help": "GAE lambda, in [0, 1]. Paper: 1."})
    whiten_advantages: bool = field(
        default=True,
        metadata={"help": "Whiten GAE advantages over the model tokens of the generation batch (veRL does)."},
    )
    kl_in_reward: bool = field(
        default=False,
        metadata={
            "help": "Subtract beta * (logp - ref_logp) from token rewards instead of a KL loss; needs beta > 0."
        },
    )
    use_turn_rewards: bool = field(
        default=False,
        metadata={"help": "Pay rollout-provided turn_rewards at the ends of their turn_spans (else all at the end)."},
    )
    # Paper defaults for PPO that differ from GRPOConfig's.
    epsilon_high: float | None = field(
        default=0.28, metadata={"help": "Upper clip bound of the policy ratio. Paper: 0.28 (lower: epsilon=0.2)."}
    )
    entropy_coef: float = field(default=0.001, metadata={"help": "Entropy bonus coefficient. Paper: 0.001."})
    scale_rewards: str = field(
        default="none",
        metadata={"help": "Has no effect in PPO (GAE replaces the group advantage); always 'none'."},
    )

    def __post_init__(self):
        check_field_types(self, parent=GRPOConfig)  # before num_generations is compared
        if self.num_generations == 1:
            self._post_init_one_rollout_per_prompt()
        else:
            super().__post_init__()
        self.validate_ppo_fields()
        if self.scale_rewards != "none":
            logger.warning(
                "scale_rewards=%r has no effect in PPO: the group-normalised advantage is replaced by GAE "
                "advantages (see whiten_advantages); using 'none'.",
                self.scale_rewards,
            )
            self.scale_rewards = "none"

    def _post_init_one_rollout_per_prompt(self) -> None:
        """`__post_init__` for classic PPO (`num_generations=1`): no filter, and GRPOConfig's checks without its
        group-size rule.

        GRPOConfig uses `num_generations` in three checks and in nothing it derives: it must be at least 2 (group
        advantages need groups; GAE does not), divide the generation batch, and, when `num_generations_eval` is
        unset, divide the global eval batch. One rollout per prompt divides every batch, so the last two always
        hold. The parent's checks therefore run with the generation batch itself as the group size (it divides the
        generation batch GRPOConfig derives from the same fields) and one rollout per eval prompt; then
        `num_generations` is 1 again. `tests/test_ppo_trainer.py::test_one_rollout_config_equals_the_grouped_one`
        checks that the result equals a grouped config's in every other field.
        """
        if self.reward_variance_filtering is not None:
            logger.warning(
                "num_generations=1: the SNR filter ranks prompt groups by their reward variance, and one rollout per "
                "prompt gives no groups, so filtering is disabled (reward_variance_filtering=None). Set "
                "num_generations >= 2 (the paper uses 16) to filter, or reward_variance_filtering=None to silence "
                "this warning."
            )
            self.reward_variance_filtering = None
        steps = self.steps_per_generation or self.gradient_accumulation_steps
        # The generation batch as given, else the share of one process, which divides the global one.
        generation_batch = self.generation_batch_size or self.per_device_train_batch_size * steps
        if generation_batch < 2:
            raise ValueError(
                f"num_generations=1 needs at least 2 rollouts per process per generation, got "
                f"per_device_train_batch_size={self.per_device_train_batch_size} x steps_per_generation={steps}; "
                "raise per_device_train_batch_size or gradient_accumulation_steps"
            )
        eval_generations = self.num_generations_eval
        self.num_generations, self.num_generations_eval = generation_batch, eval_generations or 1
        super().__post_init__()
        self.num_generations, self.num_generations_eval = 1, eval_generations

    def validate_ppo_fields(self) -> None:
        """Check the PPO fields (gamma, lam, critic_learning_rate, vf_coef, cliprange_value, kl_in_reward with
        beta); a `ValueError` naming the field and the fix otherwise."""
        if self.grad_report_every_n_steps:
            raise ValueError(
                f"grad_report_every_n_steps={self.grad_report_every_n_steps} is not available with PPO: the report "
                "needs the pre-filter batch's advantages, and GAE advantages exist only for the kept rows; use "
                "SNRFilteredGRPOTrainer for the report, or grad_report_every_n_steps=0"
            )
        if not (0.0 <= self.gamma <= 1.0):
            raise ValueError(f"gamma must be in [0, 1], got {self.gamma}; the paper uses 1.0")
        if not (0.0 <= self.lam <= 1.0):
            raise ValueError(f"lam must be in [0, 1], got {self.lam}; the paper uses 1.0")
        if self.critic_learning_rate <= 0:
            raise ValueError(f"critic_learning_rate must be > 0, got {self.critic_learning_rate}; the paper uses 1e-5")
        if self.vf_coef <= 0:
            raise ValueError(f"vf_coef must be > 0, got {self.vf_coef}; use 1.0 for a critic with its own optimizer")
        if self.cliprange_value is not None and self.cliprange_value <= 0:
            raise ValueError(
                f"cliprange_value must be > 0 or None, got {self.cliprange_value}; veRL uses 0.5, None disables it"
            )
        if self.kl_in_reward and self.beta == 0.0:
            raise ValueError(
                "kl_in_reward=True needs a KL coefficient, but beta=0.0; set beta > 0 (e.g. 0.001) or "
                "kl_in_reward=False"
            )

"""SNRFilteredPPOTrainer on the tiny offline model for trainer tests: its config, a scripted trainer, and a record of
the rows each critic update trains on."""

from trl_ragen2.models.tiny import make_tiny_model
from trl_ragen2.ppo.ppo_config import SNRFilteredPPOConfig
from trl_ragen2.ppo.ppo_trainer import SNRFilteredPPOTrainer

from .scripted import AMPLITUDES, dataset, parity_reward_for, script_generation, tiny_trainer_args


def make_args(tmp_path, **overrides):
    return tiny_trainer_args(tmp_path, SNRFilteredPPOConfig, **{"critic_learning_rate": 1e-2, **overrides})


def ppo_trainer(tmp_path, tokenizer, prompts=AMPLITUDES, reward=None, model=None, scripted=True, **args):
    trainer = SNRFilteredPPOTrainer(
        model=model if model is not None else make_tiny_model(tokenizer, seed=0),
        reward_funcs=reward or parity_reward_for(AMPLITUDES),
        args=make_args(tmp_path, **args),
        train_dataset=dataset(prompts),
        processing_class=tokenizer,
    )
    return script_generation(trainer) if scripted else trainer


def record_critic_rows(trainer):
    """Wrap the critic update to record, per micro-batch, the decoded prompts of the rows carrying critic loss."""
    calls: list[list[str]] = []
    original = trainer._critic_training_step

    def critic_step(batch):
        mask = batch["completion_mask"] * batch["tool_mask"] if "tool_mask" in batch else batch["completion_mask"]
        rows = (mask * batch["rollout_scored"].unsqueeze(1)).sum(dim=1) > 0
        calls.append(trainer.processing_class.batch_decode(batch["prompt_ids"][rows], skip_special_tokens=True))
        return original(batch)

    trainer._critic_training_step = critic_step
    return calls

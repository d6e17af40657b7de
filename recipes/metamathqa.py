# /// script
# dependencies = [
#     "trl-ragen2",
#     "peft",
#     "trackio",
# ]
# ///
"""Train a MetaMathQA agent with RAGEN-2 on TRL: SNR-aware filtering and MI collapse diagnostics.

MetaMathQA: answer grade-school word problems. One attempt as in RAGEN's code (reward 1/2^attempt with
`--env_config '{"max_attempts": 3}' --max_turns 3`), checked by RAGEN's exact match (`"reward_rule": "lenient"`
also accepts `5.0` for `5`). Problems are generated offline; `data_path` reads MetaMathQA or GSM8K files.

CPU smoke run (the offline tiny model, a couple of steps):

    accelerate launch recipes/metamathqa.py --config recipes/configs/agent_cpu.yaml

One GPU (Qwen2.5-3B as in the paper, vLLM colocate), GRPO or PPO:

    accelerate launch --config_file recipes/accelerate/single_gpu.yaml recipes/metamathqa.py \\
        --config recipes/configs/metamathqa.yaml [--algorithm ppo]

Several GPUs: `--config_file recipes/accelerate/multi_gpu.yaml` (DDP) or `zero3.yaml`; LoRA with `--use_peft --lora_r
64`; the Hub with `--push_to_hub --hub_model_id you/metamathqa-ragen2`.

The task's settings (turns, actions and tokens per turn) are those at the top of `configs/metamathqa.yaml`,
whichever `--config` is given; `--config` and the command line override them. Copy that YAML beside the script
when you copy the script (`parse_recipe_args` looks in `configs/` beside it, then next to it).

`--algorithm ppo` (or `dapo`) trains with a critic and per-token GAE (`SNRFilteredPPOTrainer`) instead of GRPO's
group advantage; `--algorithm drgrpo` is GRPO without the std normalisation and with Dr. GRPO's loss (the mapping of
the paper's Table 4 algorithms: `trl_ragen2.grpo.algorithms.PAPER_ALGORITHMS`). The algorithm
decides which trainer config the other flags fill in, so `parse_recipe_args` parses twice: first the script
arguments alone, then everything with the chosen config.
"""

from trl import ModelConfig, get_peft_config

from trl_ragen2 import (
    MetricsJSONLCallback,
    RagenRollout,
    SNRFilteredGRPOConfig,
    SNRFilteredGRPOTrainer,
    SNRFilteredPPOTrainer,
    env_return,
)
from trl_ragen2.recipe_utils import (
    AgentScriptArguments,
    build_datasets,
    evaluate_final_policy,
    model_init_kwargs,
    parse_recipe_args,
    resolve_model_name,
    task_config,
    write_run_report,
)


ENV_NAME = "metamathqa"


def parse_args(args: list[str] | None = None):
    """`(script args, trainer config, ModelConfig)` from `args` (default: the command line), its `--config` YAML and
    the task's settings in `configs/metamathqa.yaml`."""
    return parse_recipe_args(AgentScriptArguments, task_config(__file__, ENV_NAME), args)


def main(script_args: AgentScriptArguments, training_args: SNRFilteredGRPOConfig, model_args: ModelConfig) -> None:
    #### Model
    training_args.model_init_kwargs = model_init_kwargs(model_args, training_args)
    model = resolve_model_name(model_args.model_name_or_path)  # "tiny" is the offline tiny model
    peft_config = get_peft_config(model_args)  # LoRA with --use_peft

    #### Environment and dataset
    # one row per episode; the num_generations rollouts of a row play the same instance (its seed)
    num_eval = script_args.num_eval_prompts if training_args.eval_strategy != "no" else 0
    train_dataset, eval_dataset = build_datasets(
        ENV_NAME,
        script_args.env_kwargs,
        script_args.num_train_prompts,
        num_eval,
        protocol=script_args.protocol,
        max_actions=script_args.max_actions_per_episode,
    )  # the rows show the prompts the rollout renders

    #### Trainer
    trainer_class = SNRFilteredPPOTrainer if script_args.uses_critic else SNRFilteredGRPOTrainer
    trainer = trainer_class(
        model=model,
        reward_funcs=env_return,  # the trajectory return the rollout computed
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        peft_config=peft_config,
        rollout_func=RagenRollout(script_args.rollout_config()),  # multi-turn episodes in the RAGEN protocol
        callbacks=[MetricsJSONLCallback()],  # output_dir/metrics.jsonl: plots of a run still in progress
    )

    #### Training
    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    evaluate_final_policy(trainer)  # validation of the final policy, for the model card and the summary

    #### Save and push
    trainer.save_model(training_args.output_dir)
    trainer.save_state()  # trainer_state.json: the logs that `trl-ragen2 summary` and `trl-ragen2 plot` read
    details = {"Environment": ENV_NAME, "Algorithm": script_args.algorithm}
    write_run_report(trainer, ENV_NAME, details, write_plots=script_args.write_plots)
    if training_args.push_to_hub:
        trainer.push_to_hub()


if __name__ == "__main__":
    main(*parse_args())

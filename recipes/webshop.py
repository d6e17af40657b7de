# /// script
# dependencies = [
#     "trl-ragen2",
#     "peft",
#     "trackio",
# ]
# ///
"""Train a WebShop shopping agent with RAGEN-2 on TRL: SNR-aware filtering and MI collapse diagnostics.

What this run does, on top of TRL's GRPO (or PPO with `--algorithm ppo`):
- multi-turn rollouts in the RAGEN protocol: search and click for up to 9 turns, reward 1 on a purchase whose
  WebShop score is 1 (RAGEN's binary success);
- SNR-aware filtering: each update uses only the prompt groups holding 90% of the reward-variance mass;
- MI diagnostics: every few steps, reasoning is cross-scored against every prompt of the batch
  (`ragen2/mi/...`), which shows template collapse that entropy cannot;
- validation on held-out goals every `eval_steps`, checkpoints, plots, and a model card with the catalogue used.

The catalogue: `--webshop_data_dir`, else `$WEBSHOP_DATA_DIR`, else the data `trl-ragen2 data webshop small`
prepared in the cache (`--webshop_dataset all` for the 1.18 M-product set), else a procedurally generated catalogue
(stated in the logs and the card).

CPU smoke run (the offline tiny model, 3 steps, about a minute):

    accelerate launch recipes/webshop.py --config recipes/configs/webshop_cpu.yaml

One GPU, paper defaults (Qwen2.5-3B-Instruct, vLLM colocate):

    trl-ragen2 data webshop small
    accelerate launch --config_file recipes/accelerate/single_gpu.yaml recipes/webshop.py \\
        --config recipes/configs/webshop.yaml

Eight GPUs with DeepSpeed ZeRO-3, LoRA, pushing checkpoints to the Hub:

    accelerate launch --config_file recipes/accelerate/zero3.yaml recipes/webshop.py \\
        --config recipes/configs/webshop.yaml --use_peft --lora_r 64 --push_to_hub --hub_model_id you/webshop-ragen2

vLLM on separate GPUs: start `trl vllm-serve --model Qwen/Qwen2.5-3B-Instruct` (or `vllm serve`) and add
`--vllm_mode server`.

The task's settings (turns, actions and tokens per turn) are those at the top of `configs/webshop.yaml`,
whichever `--config` is given; `--config` and the command line override them. Copy that YAML beside the script
when you copy the script (`parse_recipe_args` looks in `configs/` beside it, then next to it).

`--algorithm ppo` (or `dapo`) trains with a critic and per-token GAE (`SNRFilteredPPOTrainer`) instead of GRPO's
group advantage; `--algorithm drgrpo` is GRPO without the std normalisation and with Dr. GRPO's loss (the mapping of
the paper's Table 4 algorithms: `trl_ragen2.grpo.algorithms.PAPER_ALGORITHMS`). The algorithm
decides which trainer config the other flags fill in, so `parse_recipe_args` parses twice: first the script
arguments alone, then everything with the chosen config.
"""

import logging
import os
from dataclasses import dataclass, field

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
from trl_ragen2_envs import make_env
from trl_ragen2_envs.webshop import DATA_DIR_ENV_VAR, prepared_data_dir


logger = logging.getLogger(__name__)

ENV_NAME = "webshop"
WEBSHOP_DATASETS = ("small", "all")


@dataclass
class WebShopScriptArguments(AgentScriptArguments):
    """
    The recipe's arguments (all of them: `AgentScriptArguments`) and WebShop's catalogue.

    Parameters:
        webshop_data_dir (`str`, *optional*): WebShop data folder (the 1k or the full 1.18 M-product set); else
            `$WEBSHOP_DATA_DIR`, else the data prepared by `trl-ragen2 data webshop`, else the procedural catalogue.
        webshop_dataset (`str`, defaults to `"small"`): Which prepared set to look for in the cache: `"small"` or
            `"all"`.
        procedural_products (`int`, defaults to `1000`): Size of the procedural catalogue, when it is used.
    """

    webshop_data_dir: str | None = field(default=None, metadata={"help": "WebShop data folder."})
    webshop_dataset: str = field(
        default="small", metadata={"help": "Prepared set to look for in the cache: 'small' or 'all'."}
    )
    procedural_products: int = field(default=1000, metadata={"help": "Procedural catalogue size."})

    def __post_init__(self):
        super().__post_init__()
        if self.webshop_dataset not in WEBSHOP_DATASETS:
            raise ValueError(
                f"webshop_dataset must be one of {WEBSHOP_DATASETS}, got {self.webshop_dataset!r} (the sets of "
                "`trl-ragen2 data webshop`)"
            )


def parse_args(args: list[str] | None = None):
    """`(script args, trainer config, ModelConfig)` from `args` (default: the command line), its `--config` YAML and
    the task's settings in `configs/webshop.yaml`."""
    return parse_recipe_args(WebShopScriptArguments, task_config(__file__, ENV_NAME), args)


def main(script_args: WebShopScriptArguments, training_args: SNRFilteredGRPOConfig, model_args: ModelConfig) -> None:
    #### Model
    training_args.model_init_kwargs = model_init_kwargs(model_args, training_args)
    model = resolve_model_name(model_args.model_name_or_path)  # "tiny" is the offline tiny model
    peft_config = get_peft_config(model_args)  # LoRA with --use_peft

    #### Environment and dataset
    env_config = script_args.env_kwargs
    data_dir = (
        script_args.webshop_data_dir
        or os.environ.get(DATA_DIR_ENV_VAR)
        or prepared_data_dir(script_args.webshop_dataset)  # `trl-ragen2 data webshop <set>` in the cache
    )
    if data_dir is None:
        logger.warning(
            "no WebShop data found: using a procedural catalogue; `trl-ragen2 data webshop %s` prepares the real one",
            script_args.webshop_dataset,
        )
        env_config.update(procedural=True, procedural_products=script_args.procedural_products)
    else:
        env_config["data_dir"] = str(data_dir)
    env_config.setdefault("max_turns", script_args.max_turns)
    catalogue = make_env(ENV_NAME, **env_config).catalog_name  # loads the shop once; the datasets reuse it
    logger.warning("WebShop catalogue: %s", catalogue)
    # one row per goal; the rows' split picks the goals (RAGEN's fixed train / validation split)
    num_eval = script_args.num_eval_prompts if training_args.eval_strategy != "no" else 0
    train_dataset, eval_dataset = build_datasets(
        ENV_NAME,
        env_config,
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
    details = {"Environment": ENV_NAME, "Algorithm": script_args.algorithm, "Catalogue": catalogue}
    write_run_report(trainer, ENV_NAME, details, write_plots=script_args.write_plots)
    if training_args.push_to_hub:
        trainer.push_to_hub()


if __name__ == "__main__":
    main(*parse_args())

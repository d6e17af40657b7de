# /// script
# dependencies = [
#     "trl-ragen2",
#     "peft",
#     "trackio",
# ]
# ///
"""Train a WebShop shopping agent with RAGEN-2: SNR-aware filtering and mutual-information collapse diagnostics.

What this run does, on top of TRL's GRPO (or PPO with `--algorithm ppo`):
- multi-turn rollouts in the RAGEN protocol: search and click for up to 9 turns, reward 1 on a purchase whose
  WebShop score is 1 (RAGEN's binary success);
- SNR-aware filtering: each update uses only the prompt groups holding 90% of the reward-variance mass;
- MI diagnostics: every few steps, reasoning is cross-scored against every prompt of the batch
  (`ragen2/mi/...`), which shows template collapse that entropy cannot;
- validation on held-out goals every `eval_steps`, checkpoints, plots, and a model card with the catalogue used.

The catalogue: `--webshop_data_dir`, else `$WEBSHOP_DATA_DIR`, else the project's 1,000-product copy at
`../shared/data/webshop` when present, else a procedurally generated catalogue (stated in the logs and the card).

CPU smoke run (tiny offline model, a few steps, minutes):

    accelerate launch recipes/webshop.py --config recipes/configs/webshop_cpu.yaml

One GPU, paper defaults (Qwen2.5-3B-Instruct, vLLM colocate):

    accelerate launch --config_file recipes/accelerate/single_gpu.yaml recipes/webshop.py \
        --config recipes/configs/webshop.yaml

Eight GPUs with DeepSpeed ZeRO-3, LoRA, pushing checkpoints to the Hub:

    accelerate launch --config_file recipes/accelerate/zero3.yaml recipes/webshop.py \
        --config recipes/configs/webshop.yaml --use_peft --lora_r 64 --push_to_hub --hub_model_id you/webshop-ragen2

vLLM on separate GPUs: start `trl vllm-serve --model Qwen/Qwen2.5-3B-Instruct` (or `vllm serve`) and add
`--vllm_mode server`.
"""

import logging
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from trl import ModelConfig, TrlParser, get_peft_config

from trl_ragen2 import RagenRollout, env_return
from trl_ragen2.recipe_utils import (
    AgentScriptArguments,
    algorithm_from_args,
    build_datasets,
    finish_run,
    model_init_kwargs,
    resolve_model_name,
    trainer_classes,
)


logger = logging.getLogger(__name__)

SHARED_CATALOGUE = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "webshop"


@dataclass
class WebShopScriptArguments(AgentScriptArguments):
    """
    Parameters:
        webshop_data_dir (`str`, *optional*): WebShop data folder (the 1k or the full 1.18M-product set); else
            `$WEBSHOP_DATA_DIR`, else the project's 1k copy when present, else the procedural catalogue.
        procedural_products (`int`, defaults to `1000`): Size of the procedural catalogue, when it is used.
    """

    env_name: str = field(default="webshop", metadata={"help": "Environment name (webshop for this recipe)."})
    max_turns: int = field(default=9, metadata={"help": "Turns per episode (RAGEN WebShop: 9)."})
    max_actions_per_turn: int = field(default=1, metadata={"help": "Actions per answer (RAGEN WebShop: 1)."})
    webshop_data_dir: str | None = field(default=None, metadata={"help": "WebShop data folder."})
    procedural_products: int = field(default=1000, metadata={"help": "Procedural catalogue size."})


def webshop_env_config(script_args: WebShopScriptArguments) -> dict:
    config = dict(script_args.env_kwargs)
    data_dir = script_args.webshop_data_dir or os.environ.get("WEBSHOP_DATA_DIR")
    if data_dir is None and SHARED_CATALOGUE.is_dir():
        data_dir = str(SHARED_CATALOGUE)
    if data_dir is None:
        config.update(procedural=True, procedural_products=script_args.procedural_products)
    else:
        config["data_dir"] = data_dir
    config.setdefault("max_turns", script_args.max_turns)
    return config


def main(script_args, training_args, model_args):
    ################
    # Environment and datasets
    ################
    from trl_ragen2_envs import make_env

    env_config = webshop_env_config(script_args)
    catalogue = make_env("webshop", **env_config).catalog_name
    logger.warning("WebShop catalogue: %s", catalogue)
    train_dataset, eval_dataset = build_datasets(
        "webshop", env_config, script_args.num_train_prompts, script_args.num_eval_prompts
    )

    ################
    # Model and trainer
    ################
    training_args.model_init_kwargs = model_init_kwargs(model_args, training_args)
    trainer_cls, _ = trainer_classes(script_args.algorithm)
    trainer = trainer_cls(
        model=resolve_model_name(model_args.model_name_or_path),
        reward_funcs=env_return,
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset if training_args.eval_strategy != "no" else None,
        peft_config=get_peft_config(model_args),
        rollout_func=RagenRollout(script_args.rollout_config()),
    )

    ################
    # Training
    ################
    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    metrics = finish_run(
        trainer,
        script_args,
        training_args,
        details={
            "Environment": "WebShop (RAGEN protocol)",
            "Catalogue": catalogue,
            "Algorithm": script_args.algorithm,
        },
    )
    if trainer.is_world_process_zero():
        print_summary(trainer, metrics)


def print_summary(trainer, metrics):
    keys = ["ragen2/filter/kept_fraction", "reward", "ragen2/env/webshop/success_rate",
            "eval_ragen2/env/webshop/success_rate", "ragen2/mi/first_turn/retrieval_acc"]  # fmt: skip
    print(f"steps: {trainer.state.global_step}")
    for key in keys:
        if key in metrics:
            print(f"{key}: {metrics[key]:.4f}")


if __name__ == "__main__":
    config_cls = trainer_classes(algorithm_from_args(sys.argv[1:]))[1]
    parser = TrlParser((WebShopScriptArguments, config_cls, ModelConfig))
    script_args, training_args, model_args = parser.parse_args_and_config()
    main(script_args, training_args, model_args)

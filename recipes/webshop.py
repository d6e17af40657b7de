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

    accelerate launch --config_file recipes/accelerate/single_gpu.yaml recipes/webshop.py \\
        --config recipes/configs/webshop.yaml

Eight GPUs with DeepSpeed ZeRO-3, LoRA, pushing checkpoints to the Hub:

    accelerate launch --config_file recipes/accelerate/zero3.yaml recipes/webshop.py \\
        --config recipes/configs/webshop.yaml --use_peft --lora_r 64 --push_to_hub --hub_model_id you/webshop-ragen2

vLLM on separate GPUs: start `trl vllm-serve --model Qwen/Qwen2.5-3B-Instruct` (or `vllm serve`) and add
`--vllm_mode server`.
"""

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from trl_ragen2.recipe_utils import AgentScriptArguments, parse_recipe_args, train_agent


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
    """Environment keywords: the chosen data folder, or the procedural catalogue when there is none."""
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
    # Environment
    ################
    from trl_ragen2_envs import make_env

    env_config = webshop_env_config(script_args)
    catalogue = make_env("webshop", **env_config).catalog_name
    logger.warning("WebShop catalogue: %s", catalogue)

    ################
    # Training, evaluation, model card
    ################
    train_agent(script_args, training_args, model_args, env_config=env_config, details={"Catalogue": catalogue})


if __name__ == "__main__":
    main(*parse_recipe_args(WebShopScriptArguments))

"""The recipes: TRL example scripts that run end to end on CPU with the tiny offline model (subprocesses, as a user
launches them, including a copy of one outside the repository), whose two-stage parse picks the trainer config
from `--algorithm` on the command line or in the YAML, and whose task settings come from the task's YAML only."""

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from trl_ragen2 import SNRFilteredGRPOConfig, SNRFilteredPPOConfig
from trl_ragen2.recipe_utils import TASK_FIELDS

from .webshop_data import HAS_1K_CATALOGUE
from .webshop_originals import stub_tagger, write_original_files


ROOT = Path(__file__).resolve().parent.parent
RECIPES = ROOT / "recipes"
CONFIGS = RECIPES / "configs"
TASKS = ("sokoban", "frozen_lake", "countdown", "metamathqa", "searchqa", "deepcoder")
SECTIONS = ("#### Model", "#### Environment and dataset", "#### Trainer", "#### Training", "#### Save and push")


def run(command, tmp_path, cwd=ROOT, timeout=600, **env_overrides):
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRL_EXPERIMENTAL_SILENCE": "1",
        "TRL_RAGEN2_CACHE": str(tmp_path / "cache"),
        **env_overrides,
    }
    env = {key: value for key, value in env.items() if value is not None}
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{command} failed:\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
    return result


def load_recipe(name: str):
    """A recipe file as a module (its `__main__` block does not run)."""
    spec = importlib.util.spec_from_file_location(f"recipe_{name}", RECIPES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------------------------------------------------------
# End to end


def test_webshop_cpu_preset_two_steps(tmp_path):
    out = tmp_path / "webshop"
    stdout = run(
        [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", "1", str(RECIPES / "webshop.py"),
         "--config", str(CONFIGS / "webshop_cpu.yaml"), "--max_steps", "2", "--eval_steps", "2",
         "--output_dir", str(out)],
        tmp_path,
    ).stdout  # fmt: skip
    assert "steps: 2" in stdout
    summary = json.loads((out / "run_summary.json").read_text())
    catalogue = summary["details"]["Catalogue"]
    assert catalogue == ("webshop-small-1k" if HAS_1K_CATALOGUE else "procedural-1000-seed0")
    metrics = summary["final_metrics"]
    assert "ragen2/filter/kept_fraction" in metrics and "eval_ragen2/env/webshop/success_rate" in metrics
    card = (out / "README.md").read_text()
    assert "2604.06268" in card and f"Catalogue: {catalogue}" in card
    assert (out / "plots" / "training_curves.png").stat().st_size > 0
    assert (out / "metrics.jsonl").exists() and (out / "model.safetensors").exists()


def test_recipe_copied_alone_runs_its_cpu_preset_and_finds_the_prepared_webshop_data(tmp_path):
    """A user's copy: the script, its task YAML and its preset in a new folder outside the repository, only the
    installed package importable, and WebShop data prepared by `trl-ragen2 data webshop small` in the user cache (no
    WEBSHOP_DATA_DIR)."""
    from trl_ragen2_envs.webshop.catalog.prepare import prepare_webshop_data

    originals = tmp_path / "originals"
    nouns = write_original_files(originals, num_products=60)
    prepared = prepare_webshop_data(
        "small", tmp_path / "cache" / "webshop-data" / "small", source_dir=originals, tagger=stub_tagger(nouns)
    )
    work = tmp_path / "my-project"
    work.mkdir()
    shutil.copy(RECIPES / "webshop.py", work / "train_webshop.py")
    shutil.copy(CONFIGS / "webshop.yaml", work / "webshop.yaml")  # the task's settings
    shutil.copy(CONFIGS / "webshop_cpu.yaml", work / "webshop_cpu.yaml")
    result = run(
        [sys.executable, "train_webshop.py", "--config", "webshop_cpu.yaml", "--max_steps", "1", "--eval_steps", "1",
         "--write_plots", "false"],
        tmp_path, cwd=work, WEBSHOP_DATA_DIR=None, PYTHONPATH=None,
    )  # fmt: skip
    assert "steps: 1" in result.stdout
    assert "WebShop catalogue: webshop-small-1k" in result.stderr  # the prepared cache, not the procedural one
    summary = json.loads((work / "outputs" / "webshop-cpu" / "run_summary.json").read_text())
    assert summary["details"]["Catalogue"] == "webshop-small-1k" and prepared.num_products == 60
    assert "eval_ragen2/env/webshop/success_rate" in summary["final_metrics"]


@pytest.mark.parametrize(
    "task, extra",
    [
        *[(task, []) for task in TASKS],
        ("sokoban", ["--algorithm", "ppo"]),
        ("frozen_lake", ["--use_peft", "--lora_r", "4", "--lora_target_modules", "q_proj", "v_proj"]),
        ("sokoban", ["--algorithm", "ppo", "--reward_variance_refill", "nonzero_variance"]),
        (
            "frozen_lake",
            [
                "--use_peft",
                "--lora_r",
                "4",
                "--lora_target_modules",
                "q_proj",
                "v_proj",
                "--reward_variance_refill",
                "pooled",
                "--reward_variance_top_p_mode",
                "linear",
                "--reward_variance_include_zero",
                "false",
            ],
        ),
    ],
    ids=[*TASKS, "sokoban-ppo", "frozen_lake-lora", "sokoban-ppo-refill", "frozen_lake-lora-refill"],
)
def test_task_recipe_one_step(tmp_path, task, extra):
    out = tmp_path / task
    stdout = run(
        [sys.executable, str(RECIPES / f"{task}.py"), "--config", str(CONFIGS / "agent_cpu.yaml"),
         "--max_steps", "1", "--eval_strategy", "no", "--write_plots", "false", "--output_dir", str(out), *extra],
        tmp_path,
    ).stdout  # fmt: skip
    assert "steps: 1" in stdout
    summary = json.loads((out / "run_summary.json").read_text())
    assert f"ragen2/env/{task}/success_rate" in summary["final_metrics"]
    details = dict(summary["details"])
    if task == "deepcoder":  # how the programs were isolated, on the model card too
        isolation = details.pop("Sandbox isolation")
        assert (
            isolation.startswith(("bubblewrap", "unshare"))
            and f"Sandbox isolation: {isolation}" in (out / "README.md").read_text()
        )
        level = {"bubblewrap": 3, "unshare": 2}[isolation.split()[0]]  # and in the step's metrics
        assert summary["final_metrics"]["ragen2/env/deepcoder/isolation_level"] == level
    assert details == {"Environment": task, "Algorithm": "ppo" if "ppo" in extra else "grpo"}
    if "ppo" in extra and "--reward_variance_refill" not in extra:  # the tiny model's refill rounds may keep nothing
        assert "ragen2/ppo/value_loss" in summary["final_metrics"] and (out / "critic" / "config.json").exists()
    if "--use_peft" in extra:
        assert (out / "adapter_config.json").exists()
    if "--reward_variance_refill" in extra:  # the multi-turn rollout made every round from the sampler's prompts
        metrics = summary["final_metrics"]
        assert 1 <= metrics["ragen2/filter/generation_rounds"] <= 3  # the default round limit
        assert metrics["ragen2/filter/prompts_consumed"] == metrics["ragen2/filter/num_groups"]  # the pool's groups


def test_recipe_rejects_bad_algorithm(tmp_path):
    result = subprocess.run(
        [sys.executable, str(RECIPES / "sokoban.py"), "--algorithm", "dqn", "--output_dir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode != 0
    assert (
        "algorithm must be one of ('grpo', 'drgrpo', 'ppo', 'dapo'), got 'dqn'; pass --algorithm grpo or "
        "--algorithm ppo (or drgrpo, dapo)"
    ) in result.stderr


# ---------------------------------------------------------------------------------------------------------------
# Parsing: --algorithm picks the config class, from the command line or the YAML


RECIPE_CONFIGS = [(task, config) for task in TASKS for config in (f"{task}.yaml", "agent_cpu.yaml")]
RECIPE_CONFIGS += [("webshop", "webshop.yaml"), ("webshop", "webshop_cpu.yaml")]


def test_every_config_belongs_to_a_recipe():
    assert sorted({config for _, config in RECIPE_CONFIGS}) == sorted(p.name for p in CONFIGS.glob("*.yaml"))


@pytest.mark.parametrize("recipe, config", RECIPE_CONFIGS, ids=[f"{r}-{c}" for r, c in RECIPE_CONFIGS])
@pytest.mark.parametrize("algorithm", ["grpo", "ppo"])
def test_every_config_parses_for_both_algorithms(recipe, config, algorithm):
    argv = ["--config", str(CONFIGS / config), "--algorithm", algorithm]
    argv += ["--bf16", "false", "--use_cpu", "true"]  # the GPU presets, checked on this CPU machine
    script_args, training_args, model_args = load_recipe(recipe).parse_args(argv)
    assert type(training_args) is (SNRFilteredPPOConfig if algorithm == "ppo" else SNRFilteredGRPOConfig)
    assert script_args.algorithm == algorithm and training_args.reward_variance_filtering == "top_p"
    assert model_args.model_name_or_path  # every preset names its model
    # the paper configs play RAGEN's protocol; the CPU presets keep the recipe scripts' default
    expected_protocol = "trl_ragen2" if config.endswith("_cpu.yaml") else "ragen"
    assert script_args.protocol == script_args.rollout_config().protocol == expected_protocol
    # the paper configs keep RAGEN's absolute margin of 0.01; the CPU presets the library's relative default
    expected_margin = ("relative" if config.endswith("_cpu.yaml") else "absolute", 0.01)
    assert (training_args.reward_variance_selection_eps_mode, training_args.reward_variance_selection_eps) == (
        expected_margin
    )


def test_algorithm_from_the_yaml_and_the_command_line_overrides_it(tmp_path):
    parse_args = load_recipe("sokoban").parse_args
    config = tmp_path / "ppo.yaml"
    config.write_text((CONFIGS / "agent_cpu.yaml").read_text().replace("algorithm: grpo", "algorithm: ppo"))
    script_args, training_args, _ = parse_args(["--config", str(config), "--critic_learning_rate", "3e-5"])
    assert script_args.algorithm == "ppo" and type(training_args) is SNRFilteredPPOConfig
    assert training_args.critic_learning_rate == 3e-5  # a PPO-only flag reaches the PPO config
    script_args, training_args, _ = parse_args(["--config", str(config), "--algorithm", "grpo"])
    assert script_args.algorithm == "grpo" and type(training_args) is SNRFilteredGRPOConfig
    with pytest.raises(ValueError, match=r"not used by the HfArgumentParser: \['--critic_learning_rate', '3e-5'\]"):
        parse_args(["--config", str(CONFIGS / "agent_cpu.yaml"), "--critic_learning_rate", "3e-5"])  # GRPO has none


def test_help_lists_script_trainer_and_model_flags(capsys):
    with pytest.raises(SystemExit) as exit_info:
        load_recipe("webshop").parse_args(["--algorithm", "ppo", "--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    for flag in ("--webshop_data_dir", "--max_turns", "--reward_variance_top_p", "--critic_learning_rate", "--lora_r"):
        assert flag in text


@pytest.mark.parametrize("recipe", ["webshop", *TASKS])
def test_recipe_is_one_readable_trl_script(recipe):
    """TRL's example-script layout: PEP 723 header, commands in the docstring, TrlParser over the three argument
    groups, the five sections in order, the trainer built and trained in the file, no command-line scanning."""
    text = (RECIPES / f"{recipe}.py").read_text()
    assert text.startswith("# /// script\n# dependencies = [\n") and '#     "trl-ragen2",' in text
    assert f"accelerate launch recipes/{recipe}.py --config recipes/configs/" in text
    assert re.search(r"parse_recipe_args\(\w*ScriptArguments, task_config\(__file__, ENV_NAME\), args\)", text)
    positions = [text.index(section + "\n") for section in SECTIONS]
    assert positions == sorted(positions)
    assert "trainer = trainer_class(" in text and "trainer.train(" in text and "trainer.save_model(" in text
    assert "sys.argv" not in text and "argv" not in text.replace("parse_args", "")
    assert "shared" not in text  # nothing but the installed packages and the user's own files


@pytest.mark.parametrize("task", ["countdown", "metamathqa"])
def test_paper_configs_score_with_ragens_rule(task):
    from trl_ragen2.recipe_utils import build_datasets
    from trl_ragen2_envs import make_env

    argv = ["--config", str(CONFIGS / f"{task}.yaml"), "--bf16", "false", "--use_cpu", "true"]
    script_args, _, _ = load_recipe(task).parse_args(argv)
    assert script_args.env_kwargs == {"reward_rule": "ragen"}
    train, _ = build_datasets(task, script_args.env_kwargs, 2, 0)
    assert make_env(task, **json.loads(train[0]["env_config"])).reward_rule == "ragen"  # what each rollout builds


def test_searchqa_paper_config_plays_ragens_rules():
    from trl_ragen2.recipe_utils import build_datasets
    from trl_ragen2_envs import make_env

    argv = ["--config", str(CONFIGS / "searchqa.yaml"), "--bf16", "false", "--use_cpu", "true"]
    script_args, _, _ = load_recipe("searchqa").parse_args(argv)
    assert script_args.env_kwargs == {"rules": "ragen"} and script_args.protocol == "ragen"
    train, _ = build_datasets("searchqa", script_args.env_kwargs, 2, 0, protocol="ragen")
    env = make_env("searchqa", **json.loads(train[0]["env_config"]))  # what each rollout builds
    assert (env.rules, env.top_k) == ("ragen", 5)
    assert (
        "\nAvailable actions: search[<query>], finish[<answer>]\nYou have 10 actions left."
        in train[0]["prompt"][1]["content"]
    )


def test_recipe_datasets_show_the_rollouts_prompt():
    from trl_ragen2.recipe_utils import build_datasets

    train, evaluation = build_datasets("sokoban", {}, 2, 1, protocol="ragen", max_actions=7)
    user = train[0]["prompt"][1]["content"]
    assert user.startswith("\nTurn 1:\nState:\nCoordinates: \n") and "You have 7 actions left." in user
    assert user.endswith("(tokens).\n") and len(evaluation) == 1


def test_recipe_datasets_give_split_taking_environments_their_split(tmp_path_factory):
    from trl_ragen2.recipe_utils import build_datasets

    from .webshop_data import index_cache_dir

    config = {"procedural": True, "procedural_products": 100, "cache_dir": index_cache_dir(tmp_path_factory)}
    train, evaluation = build_datasets("webshop", config, 1, 1, eval_split="test")
    assert json.loads(train[0]["env_config"])["split"] == "train"
    assert json.loads(evaluation[0]["env_config"])["split"] == "test"
    train, evaluation = build_datasets("sokoban", {}, 1, 1)  # no split keyword: the config is left alone
    assert train[0]["env_config"] == evaluation[0]["env_config"] == "{}"


@pytest.mark.parametrize(
    ("config", "turns", "actions_per_turn"),
    [("sokoban", 5, 2), ("frozen_lake", 5, 2), ("webshop", 9, 1), ("searchqa", 5, 1), ("countdown", 1, 1),
     ("metamathqa", 1, 1), ("deepcoder", 1, 1)],
)  # fmt: skip
def test_paper_configs_turn_budgets(config, turns, actions_per_turn):
    argv = ["--config", str(CONFIGS / f"{config}.yaml"), "--bf16", "false", "--use_cpu", "true"]
    script_args, _, _ = load_recipe(config).parse_args(argv)
    assert (script_args.max_turns, script_args.max_actions_per_turn) == (turns, actions_per_turn)


@pytest.mark.parametrize("recipe", ["webshop", *TASKS])
def test_recipe_rows_and_rollout_share_the_protocol(recipe):
    """The rows' prompts are built with the rollout's protocol and action budget (`build_datasets`)."""
    text = (RECIPES / f"{recipe}.py").read_text()
    assert "protocol=script_args.protocol" in text and "max_actions=script_args.max_actions_per_episode" in text
    assert "RagenRollout(script_args.rollout_config())" in text  # RolloutConfig.protocol = script_args.protocol


# ---------------------------------------------------------------------------------------------------------------
# A task's settings live in its YAML only


def copy_recipe(recipe: str, folder: Path, task_yaml: str | None) -> Path:
    """The recipe in `folder`, with `task_yaml` (the text of its task's YAML) in `folder/configs/` unless None."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(RECIPES / f"{recipe}.py", folder / f"{recipe}.py")
    if task_yaml is not None:
        (folder / "configs").mkdir(exist_ok=True)
        (folder / "configs" / f"{recipe}.yaml").write_text(task_yaml)
    return folder / f"{recipe}.py"


def parse_copy(path: Path, argv: list[str]):
    spec = importlib.util.spec_from_file_location(f"copy_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.parse_args(argv)


@pytest.mark.parametrize("recipe", ["webshop", *TASKS])
def test_a_task_setting_is_read_from_the_task_yaml_only(recipe, tmp_path):
    """Changing a task setting in `configs/<task>.yaml` changes what the recipe parses, also under the CPU preset
    (which sets no task field but `max_tokens_per_turn`); the script itself holds none of them."""
    text = (RECIPES / f"{recipe}.py").read_text()
    assert [name for name in TASK_FIELDS if re.search(rf"^\s*{name}\s*[:=]", text, re.MULTILINE)] == []
    preset = ["--config", str(CONFIGS / ("webshop_cpu.yaml" if recipe == "webshop" else "agent_cpu.yaml"))]
    task_yaml = (CONFIGS / f"{recipe}.yaml").read_text()
    original = yaml.safe_load(task_yaml)["max_actions_per_turn"]
    assert parse_copy(copy_recipe(recipe, tmp_path / "a", task_yaml), preset)[0].max_actions_per_turn == original
    changed = re.sub(r"(?m)^max_actions_per_turn: *\d+", "max_actions_per_turn: 3", task_yaml)
    script_args = parse_copy(copy_recipe(recipe, tmp_path / "b", changed), preset)[0]
    assert script_args.max_actions_per_turn == 3 and script_args.rollout_config().max_actions_per_turn == 3
    script_args = parse_copy(copy_recipe(recipe, tmp_path / "c", changed), [*preset, "--max_actions_per_turn", "4"])[0]
    assert script_args.max_actions_per_turn == 4  # the command line still wins


def test_every_task_yaml_sets_every_task_field():
    for task in ("webshop", *TASKS):
        config = yaml.safe_load((CONFIGS / f"{task}.yaml").read_text())
        assert [name for name in TASK_FIELDS if name not in config] == [], task


def test_a_recipe_finds_its_task_yaml_next_to_it_and_otherwise_needs_the_fields(tmp_path):
    """Copied with `sokoban.yaml` beside it (no `configs/`), a recipe reads its task's settings from there; copied
    alone, it needs them in `--config` or on the command line, and says which are missing and what to copy."""
    work = tmp_path / "project"
    recipe = copy_recipe("sokoban", work, None)
    with pytest.raises(ValueError, match=r"sets max_turns, max_actions_per_turn; copy the task's recipes/configs/"):
        parse_copy(recipe, ["--config", str(CONFIGS / "agent_cpu.yaml")])
    script_args = parse_copy(
        recipe, ["--config", str(CONFIGS / "sokoban.yaml"), "--bf16", "false", "--use_cpu", "true"]
    )[0]
    assert (script_args.max_turns, script_args.max_actions_per_turn, script_args.max_tokens_per_turn) == (5, 2, 400)
    shutil.copy(CONFIGS / "sokoban.yaml", work / "sokoban.yaml")
    script_args = parse_copy(recipe, ["--config", str(CONFIGS / "agent_cpu.yaml")])[0]
    assert (script_args.max_turns, script_args.max_actions_per_turn, script_args.max_tokens_per_turn) == (5, 2, 24)


def test_a_task_yaml_without_a_task_field_is_an_error(tmp_path):
    task_yaml = re.sub(r"(?m)^max_turns:.*\n", "", (CONFIGS / "sokoban.yaml").read_text())
    recipe = copy_recipe("sokoban", tmp_path, task_yaml)
    with pytest.raises(ValueError, match=r"sokoban.yaml must set the task's max_turns"):
        parse_copy(recipe, ["--config", str(CONFIGS / "agent_cpu.yaml")])


@pytest.mark.parametrize("algorithm", ["grpo", "ppo"])
@pytest.mark.parametrize("control", ["random_matched", "skip_matched"])
def test_control_arms_from_the_command_line(algorithm, control):
    argv = [
        "--config",
        str(CONFIGS / "agent_cpu.yaml"),
        "--algorithm",
        algorithm,
        "--reward_variance_control",
        control,
    ]
    _, training_args, _ = load_recipe("frozen_lake").parse_args(argv)
    assert training_args.reward_variance_control == control

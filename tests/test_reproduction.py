"""docs/reproduction.md: every command on the page is parsed by its recipe's own parser (no training), every value
it sets reaches the parsed arguments, and every flag the page names exists. The CPU smoke runs of the same commands
are in `test_reproduction_slow.py`."""

import re

import pytest
from trl import ModelConfig, TrlParser

from trl_ragen2 import SNRFilteredGRPOConfig, SNRFilteredPPOConfig
from trl_ragen2.grpo.algorithms import CRITIC_ALGORITHMS, PAPER_ALGORITHMS
from trl_ragen2.recipe_utils import AgentScriptArguments

from .reproduction_commands import ACCELERATE_OPTIONS, PAGE, ROOT, Command, load_recipe, page_commands, parse_line


COMMANDS = page_commands()
CPU = ["--bf16", "false", "--use_cpu", "true"]  # the GPU configs, parsed on this CPU machine
TABLE4_TASKS = ("sokoban", "frozen_lake", "metamathqa", "countdown")


def parse(command: Command, extra: tuple[str, ...] = ()):
    return load_recipe(command.recipe).parse_args([*command.args, *extra, *CPU])


def matches(value, text: str) -> bool:
    """Whether a parsed value is what the command line's `text` says."""
    if isinstance(value, bool):
        return text.lower() in ("true", "false") and value == (text.lower() == "true")
    if isinstance(value, int | float):
        return float(text) == value
    return str(value) == text


def test_the_page_has_commands_for_tables_4_to_8():
    assert sorted({c.table for c in COMMANDS}) == ["Table 4", "Table 5", "Table 6", "Table 7", "Table 8"]
    names = [c.name for c in COMMANDS]
    assert len(names) == len(set(names))  # one output folder per run: a run refuses another run's folder


def test_the_parser_reads_the_page_as_it_is_written():
    block = "accelerate launch --config_file a.yaml recipes/sokoban.py \\\n  --x 1  # note\n"
    text = f"## Table 9: x\n\n```bash\n{block}```\n"
    assert page_commands(text) == [Command("Table 9", "sokoban", ("--config_file", "a.yaml"), ("--x", "1"))]


@pytest.mark.parametrize("command", COMMANDS, ids=[c.name for c in COMMANDS])
def test_every_command_parses_and_sets_what_it_says(command):
    for option, value in zip(command.launcher[::2], command.launcher[1::2], strict=True):
        assert option in ACCELERATE_OPTIONS and (ROOT / value).is_file()
    assert (ROOT / command.value("--config")).is_file()
    parsed = parse(command)
    script_args, training_args, _ = parsed
    flags = [(arg[2:], command.args[i + 1]) for i, arg in enumerate(command.args) if arg.startswith("--")]
    for name, text in flags:
        if name == "config":
            continue
        (value,) = [getattr(group, name) for group in parsed if hasattr(group, name)]
        assert matches(value, text), f"--{name} {text} parsed as {value!r}"
    # --algorithm picked the trainer config and RAGEN's aggregation for it (`PAPER_ALGORITHMS`)
    uses_critic = script_args.algorithm in CRITIC_ALGORITHMS
    assert type(training_args) is (SNRFilteredPPOConfig if uses_critic else SNRFilteredGRPOConfig)
    for name, value in PAPER_ALGORITHMS[script_args.algorithm].items():
        assert getattr(training_args, name) == value
    assert training_args.max_steps == 1600 and script_args.protocol == "ragen"  # the paper config underneath


@pytest.mark.parametrize("task", TABLE4_TASKS)
def test_table_4_commands_parse_for_every_task(task):
    """The page says: for the other tasks replace `sokoban` in the script, the config and the folder."""
    for command in [c for c in COMMANDS if c.table == "Table 4"]:
        args = tuple(arg.replace("sokoban", task) for arg in command.args)
        script_args, training_args, _ = parse(Command(command.table, task, command.launcher, args))
        assert training_args.output_dir.startswith(f"outputs/table4/{task}-")
        assert script_args.max_turns == (5 if task in ("sokoban", "frozen_lake") else 1)


@pytest.mark.parametrize("table", ["Table 4", "Table 5"])
def test_the_no_filter_arm_of_each_filtered_command_keeps_every_group(table):
    """The page: the no-filter arm adds `--reward_variance_top_p 1.0` (RAGEN's `rollout_filter_value=1.0`)."""
    for command in [c for c in COMMANDS if c.table == table and c.name.endswith("-filter")]:
        _, training_args, _ = parse(command, ("--reward_variance_top_p", "1.0"))
        assert training_args.reward_variance_top_p == 1.0 and training_args.reward_variance_include_zero


def test_every_flag_the_page_names_exists():
    """Also the flags in the prose (`--env_config`, the layout flags of the Sokoban 14B row)."""
    options = {"--config", *ACCELERATE_OPTIONS}
    for config in (SNRFilteredGRPOConfig, SNRFilteredPPOConfig):  # every recipe parses these three groups
        options |= set(TrlParser((AgentScriptArguments, config, ModelConfig))._option_string_actions)
    named = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9_]*\b", PAGE.read_text(encoding="utf-8")))
    assert named and sorted(named - options) == []


def test_the_method_pages_gpu_commands_are_the_paper_main_comparison():
    """docs/method.md's "What would settle it": FrozenLake PPO on the paper config, once with the paper's filter
    (linear top-p 0.9 on the variance, zero-variance groups dropped) and once with the filter off, same seed."""
    text = (ROOT / "docs" / "method.md").read_text(encoding="utf-8")
    filtered, unfiltered = page_commands(text)
    for command in (filtered, unfiltered):
        script_args, training_args, _ = parse(command)
        assert command.recipe == "frozen_lake" and script_args.algorithm == "ppo"
        assert type(training_args) is SNRFilteredPPOConfig and training_args.max_steps == 1600
        assert training_args.seed == 0
    _, on, _ = parse(filtered)
    _, off, _ = parse(unfiltered)
    assert on.reward_variance_filtering == "top_p" and on.reward_variance_top_p == 0.9
    assert on.reward_variance_top_p_mode == "linear"
    assert not on.reward_variance_include_zero
    assert off.reward_variance_filtering is None


def test_the_recipes_cpu_vllm_command_and_its_correction_flag():
    """recipes/README.md's vLLM-on-CPU command generates through a float32 colocate engine, and the flag its text
    names for skipping TRL's importance-sampling forward turns the correction off (TRL's default keeps it on)."""
    text = (ROOT / "recipes" / "README.md").read_text(encoding="utf-8")
    section = text.split("## vLLM on a CPU-only machine", 1)[1].split("\n## ", 1)[0]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0].replace("\\\n", " ")
    line = block.strip().removeprefix("VLLM_CPU_KVCACHE_SPACE=1 ")
    command = parse_line("none", line)
    flag = "--vllm_importance_sampling_correction false"
    assert f"`{flag}`" in section
    _, default, _ = load_recipe(command.recipe).parse_args(list(command.args))
    _, without, _ = load_recipe(command.recipe).parse_args([*command.args, *flag.split()])
    for args in (default, without):
        assert args.use_vllm and args.vllm_mode == "colocate" and args.vllm_dtype == "float32"
    assert default.vllm_importance_sampling_correction is True
    assert without.vllm_importance_sampling_correction is False

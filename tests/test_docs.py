"""The documentation in docs/ matches the code: links resolve, and every logged metric, config field and environment
(with its keywords, tools and the examples shown) is documented.

Metric keys are collected twice: statically, from `trl_ragen2.runs.keys` (the one module that spells them: its keys
and key templates) and from the pure functions that name the templated parts (fast); and dynamically, from the
`log_history` of one real PPO step on the tiny model with the RAGEN rollout, the MI diagnostics, KL-in-reward and an
evaluation, which exercises every writer (GRPO's keys are a subset: the PPO trainer is its subclass).
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
from pathlib import Path

import pytest

from trl_ragen2.runs import keys as metric_keys
from trl_ragen2.runs.keys import MI_SCOPES

from .webshop_data import DATA_DIR, HAS_1K_CATALOGUE


ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
METRICS_DOC = DOCS / "metrics.md"
CONFIG_DOC = DOCS / "configuration.md"
DIFFERENCES_DOC = DOCS / "differences.md"
ENV_CARDS = DOCS / "environments"

FENCE = re.compile(r"^[ \t]*(```|~~~).*?^[ \t]*\1[^\n]*$", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)
BACKTICKED = re.compile(r"`([^`\n]+)`")
PLACEHOLDER = re.compile(r"\{[^{}]*\}|<[^<>/]*>")


def markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def prose(text: str) -> str:
    """Markdown without fenced code blocks (links and headings inside them are not links or headings)."""
    return FENCE.sub("", text)


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    result = set()
    for heading in HEADING.findall(prose(path.read_text(encoding="utf-8"))):
        anchor = github_anchor(heading)
        count = seen.get(anchor, 0)
        seen[anchor] = count + 1
        result.add(anchor if count == 0 else f"{anchor}-{count}")
    return result


def backticked(path: Path) -> set[str]:
    return set(BACKTICKED.findall(path.read_text(encoding="utf-8")))


# ---------------------------------------------------------------------------------------------------------------
# Links


METHOD_PAGES = ["diagnostics.md", "filtering.md", "ppo.md", "agent_loop.md", "configuration.md", "differences.md"]


def test_docs_exist():
    expected = ["index.md", *METHOD_PAGES, "metrics.md", "scaling.md", "tiny_model.md", "cli.md"]
    assert [name for name in expected if not (DOCS / name).is_file()] == []


DOC_PATH = re.compile(r"\bdocs/[\w./-]+\.md\b")
NAMING_FOLDERS = ("trl_ragen2", "envs", "tests", "recipes", "benchmarks", "notebooks")


def test_docs_pages_named_outside_the_docs_exist():
    """`docs/<page>.md` named in code, tests, recipes, notebooks or the README (docstrings, error messages, comments)
    is a page that exists."""
    files = [ROOT / "README.md"]
    files += [path for folder in NAMING_FOLDERS for path in sorted((ROOT / folder).rglob("*"))
              if path.suffix in (".py", ".md", ".ipynb", ".yaml")]  # fmt: skip
    named = {page: path.relative_to(ROOT) for path in files for page in DOC_PATH.findall(path.read_text("utf-8"))}
    assert named, "no docs/... page named anywhere: the pattern is wrong"
    assert {page: where for page, where in named.items() if not (ROOT / page).is_file()} == {}


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(path):
    text = INLINE_CODE.sub(lambda m: "`" + "x" * (len(m.group()) - 2) + "`", prose(path.read_text(encoding="utf-8")))
    broken = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: ...
            continue
        file_part, _, fragment = target.partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path
        if not resolved.exists():
            broken.append(f"{target}: no such file {resolved}")
        elif fragment and resolved.suffix == ".md" and fragment not in anchors(resolved):
            broken.append(f"{target}: no heading with anchor #{fragment} in {resolved.name}")
    assert broken == [], f"{path.relative_to(ROOT)} has broken links:\n" + "\n".join(broken)


def test_readme_links_the_documentation():
    assert "docs/index.md" in LINK.findall((ROOT / "README.md").read_text(encoding="utf-8"))


def test_index_links_every_page():
    linked = {Path(target.partition("#")[0]) for target in LINK.findall((DOCS / "index.md").read_text())}
    pages = {path.relative_to(DOCS) for path in DOCS.rglob("*.md")} - {Path("index.md")}
    assert sorted(map(str, pages - linked)) == []


# ---------------------------------------------------------------------------------------------------------------
# Metric keys


def documented_keys() -> set[str]:
    keys = {token for token in backticked(METRICS_DOC) if re.fullmatch(r"(eval_)?ragen2/[^\s]+", token)}
    return {key for key in keys if not key.endswith("...")}  # `ragen2/ppo/...` names a group, not a key


def normalize(key: str) -> str:
    """A logged key with its environment and scope replaced by the placeholders metrics.md uses."""
    from trl_ragen2_envs import ENVIRONMENTS

    parts = key.split("/")
    if len(parts) >= 3 and parts[0] in ("ragen2", "eval_ragen2"):
        if parts[1] == "env" and parts[2] in ENVIRONMENTS:
            parts[2] = "<env>"
        if parts[1] == "mi" and parts[2] in MI_SCOPES:
            parts[2] = "<scope>"
        if parts[1] == "grad" and re.fullmatch(r"bucket_\d+", parts[2]):
            parts[2] = "bucket_<i>"
    return "/".join(parts)


def source_templates() -> dict[str, set[str]]:
    """Every key of `trl_ragen2.runs.keys`, by the name that makes it: its key constants, and each key function
    called with `<...>` placeholders (a template). Namespace prefixes (`ragen2/mi/`) are not keys."""
    templates: dict[str, set[str]] = {}
    for name, value in vars(metric_keys).items():
        if name.isupper() and isinstance(value, str) and value.startswith("ragen2/") and not value.endswith("/"):
            templates.setdefault(normalize(value), set()).add(name)
        elif inspect.isfunction(value) and value.__module__ == metric_keys.__name__:
            key = value(*(f"<{parameter}>" for parameter in inspect.signature(value).parameters))
            if key.startswith("ragen2/"):  # not `evaluation`, which prefixes any key
                templates.setdefault(key, set()).add(name)
    return templates


def test_only_the_keys_module_spells_a_metric_key():
    """No module of trl_ragen2 but `runs/keys.py` holds a `ragen2/` string (docstrings aside): every key the code
    logs or reads is built there, so the checks below see them all."""
    spelled = []
    for path in sorted((ROOT / "trl_ragen2").rglob("*.py")):
        if path == ROOT / "trl_ragen2" / "runs" / "keys.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        spelled += [
            f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and "ragen2/" in node.value
            and id(node) not in docstrings
        ]
    assert spelled == [], "build these keys with trl_ragen2.runs.keys"


def template_regex(template: str) -> re.Pattern:
    pieces = PLACEHOLDER.split(template)
    return re.compile("[^/]+".join(re.escape(piece) for piece in pieces))


def expected_keys() -> set[str]:
    """The keys the pure functions name, expanded with the placeholders of metrics.md (train keys only)."""
    import torch

    from trl_ragen2.agents.rollout import Episode, EpisodeSpec
    from trl_ragen2.agents.rollout_func import aggregate_env_metrics
    from trl_ragen2.collapse.detector import ALARM_KEYS
    from trl_ragen2.collapse.diagnostics import MIDiagnostics
    from trl_ragen2.collapse.text_metrics import TEXT_KEYS
    from trl_ragen2.filtering.grad_report import BUCKET_KEYS
    from trl_ragen2.filtering.selection import filter_stats
    from trl_ragen2_envs import ENVIRONMENTS, get_env_class

    stats = filter_stats(torch.tensor([0.0, 1.0]), 2, torch.ones(1, dtype=bool))
    keys = {metric_keys.filter_key(key) for key in stats}
    keys |= {metric_keys.mi_key("<scope>", key) for key in MIDiagnostics().metric_keys}
    episode = Episode(EpisodeSpec("sokoban", 0), None, [], [], 1, 1)
    keys |= {metric_keys.ENV + key for key in aggregate_env_metrics([("<env>", episode.stats())])}
    keys |= {
        metric_keys.env_key(name, key) for name in ENVIRONMENTS for key in get_env_class(name).episode_metric_keys
    }
    keys |= {key for key in source_templates() if not PLACEHOLDER.search(key)}
    keys |= {metric_keys.text_key(key) for key in TEXT_KEYS}
    keys |= {metric_keys.alarm_key(key) for key in ALARM_KEYS}
    keys |= {metric_keys.grad_bucket_key("<i>", key) for key in BUCKET_KEYS}
    return keys


def test_every_key_the_code_names_is_documented():
    missing = sorted(expected_keys() - documented_keys())
    assert missing == [], f"metric keys missing from docs/metrics.md: {missing}"


def test_every_key_template_in_the_source_matches_a_documented_key():
    documented = documented_keys()
    unmatched = {
        template: files
        for template, files in source_templates().items()
        if not any(template_regex(template).fullmatch(key) for key in documented)
    }
    assert unmatched == {}, f"source keys with no entry in docs/metrics.md: {unmatched}"


def test_every_documented_key_exists_in_the_code():
    """No stale entries: each documented key is named by the code (evaluation keys: `eval_` + a training key)."""
    patterns = [template_regex(template) for template in source_templates()]
    named = expected_keys()
    stale = []
    for key in documented_keys():
        train_key = key.removeprefix("eval_")
        if key.startswith("eval_") and not train_key.startswith(("ragen2/env/", "ragen2/ppo/")):
            stale.append(f"{key} (only episode and PPO statistics are logged in evaluation)")
        elif train_key not in named and not any(pattern.fullmatch(train_key) for pattern in patterns):
            stale.append(key)
    assert sorted(stale) == []


def test_training_and_evaluation_step_logs_only_documented_keys(tmp_path, tiny_tokenizer):
    """One PPO step (critic, GAE, KL in the reward) on RAGEN Sokoban rollouts with the MI diagnostics and the filter,
    then an evaluation: every `ragen2/` key in the logs is documented."""
    from datasets import Dataset

    from trl_ragen2.agents.rollout import RolloutConfig
    from trl_ragen2.agents.rollout_func import RagenRollout, env_return
    from trl_ragen2.models.tiny import tiny_model_path
    from trl_ragen2.ppo.ppo_config import SNRFilteredPPOConfig
    from trl_ragen2.ppo.ppo_trainer import SNRFilteredPPOTrainer
    from trl_ragen2_envs.datasets import build_rows

    args = SNRFilteredPPOConfig(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=8,  # 2 rooms x 4 rollouts
        num_generations=4,
        max_completion_length=256,  # room for two short turns and their feedback
        max_steps=1,
        beta=0.01,  # KL in the reward logs ragen2/ppo/kl (needs the reference model, hence a saved tiny model)
        kl_in_reward=True,
        mi_num_samples=4,  # the diagnostics run at step 1 in both scopes
        eval_strategy="steps",
        eval_steps=1,
        per_device_eval_batch_size=2,
        num_generations_eval=1,
        bf16=False,
        use_cpu=True,
        activation_checkpointing=False,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        seed=0,
    )
    trainer = SNRFilteredPPOTrainer(
        model=tiny_model_path(seed=0),
        reward_funcs=env_return,
        args=args,
        train_dataset=Dataset.from_list(build_rows("sokoban", "train", 2)),
        eval_dataset=Dataset.from_list(build_rows("sokoban", "validation", 2)),
        processing_class=tiny_tokenizer,
        rollout_func=RagenRollout(RolloutConfig(max_turns=2)),
    )
    # Scripted replies that differ within a group, so returns vary and the filter keeps some groups.
    replies = [
        "a</think><answer>Down || Left</answer>",
        "b</think><answer>Up</answer>",
        "c",
        "d</think><answer>x</answer>",
    ]

    def generate(prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        encoded = [tiny_tokenizer.encode(replies[i % 4], add_special_tokens=False) for i in range(len(prompt_ids))]
        return [ids + [tiny_tokenizer.eos_token_id] for ids in encoded], None

    trainer._generate_single_turn = generate
    trainer.train()

    logged = {normalize(key) for entry in trainer.state.log_history for key in entry if "ragen2/" in key}
    # the run reached every writer: filter, both MI scopes, episodes (train and eval), PPO (train and eval)
    for prefix in ("ragen2/filter/", "ragen2/mi/<scope>/", "ragen2/env/<env>/", "eval_ragen2/env/<env>/",
                   "ragen2/ppo/", "eval_ragen2/ppo/"):  # fmt: skip
        assert any(key.startswith(prefix) for key in logged), f"no {prefix} key logged"
    assert sorted(logged - documented_keys()) == []


# ---------------------------------------------------------------------------------------------------------------
# Config fields


def own_fields(cls) -> list[dataclasses.Field]:
    """The dataclass fields `cls` itself declares (not those it inherits unchanged)."""
    names = inspect.get_annotations(cls)
    return [f for f in dataclasses.fields(cls) if f.name in names]


def config_groups():
    from trl_ragen2.agents.rollout import RolloutConfig
    from trl_ragen2.grpo.grpo_config import GradientReportArguments, MIDiagnosticsArguments, SNRFilterArguments
    from trl_ragen2.ppo.ppo_config import SNRFilteredPPOConfig
    from trl_ragen2.recipe_utils import AgentScriptArguments

    return [
        ("", SNRFilterArguments, dataclasses.fields(SNRFilterArguments)),
        ("", MIDiagnosticsArguments, dataclasses.fields(MIDiagnosticsArguments)),
        ("", GradientReportArguments, dataclasses.fields(GradientReportArguments)),
        ("", SNRFilteredPPOConfig, own_fields(SNRFilteredPPOConfig)),
        ("RolloutConfig.", RolloutConfig, dataclasses.fields(RolloutConfig)),
        ("AgentScriptArguments.", AgentScriptArguments, dataclasses.fields(AgentScriptArguments)),
    ]


def test_ragen2_config_fields_are_in_the_configuration_reference():
    from trl_ragen2.grpo.grpo_config import SNRFilteredGRPOConfig

    ragen2_fields = [
        f.name for f in dataclasses.fields(SNRFilteredGRPOConfig) if f.name.startswith(("reward_variance_", "mi_"))
    ]
    assert len(ragen2_fields) >= 20  # the two groups exist under their prefixes
    tokens = backticked(CONFIG_DOC)
    missing = [name for name in ragen2_fields if name not in tokens]
    for prefix, _, fields in config_groups():
        missing += [prefix + f.name for f in fields if prefix + f.name not in tokens]
    assert missing == [], f"config fields missing from docs/configuration.md: {missing}"


def table_defaults(path: Path) -> dict[str, str]:
    """`| `field` | default | ...` rows of a page's tables: field -> the default cell."""
    rows = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        match = re.fullmatch(r"`([\w.]+)`", cells[0]) if len(cells) >= 3 else None
        if match:
            rows.setdefault(match.group(1), cells[1])
    return rows


def defaults_that_differ(rows: dict[str, str], prefix: str, fields) -> list[str]:
    """The fields whose documented default (a Python literal in the table's second column) is not the code's."""
    wrong = []
    for field in fields:
        cell = rows.get(prefix + field.name)
        literal = re.match(r"`([^`]+)`", cell or "")
        if literal is None:
            continue  # a default that depends on the environment or the trainer, described in words
        try:
            documented = ast.literal_eval(literal.group(1))
        except (ValueError, SyntaxError):
            continue
        default = field.default_factory() if field.default is dataclasses.MISSING else field.default
        if documented != default:
            wrong.append(f"{prefix}{field.name}: docs say {documented!r}, code has {default!r}")
    return wrong


def test_documented_defaults_match_the_code():
    """Where configuration.md's tables give a default as a Python literal, it is the field's default."""
    rows = table_defaults(CONFIG_DOC)
    wrong = [entry for prefix, _, fields in config_groups() for entry in defaults_that_differ(rows, prefix, fields)]
    assert wrong == []


def test_sandbox_page_lists_every_sandbox_config_field_with_its_default():
    from trl_ragen2_envs.deepcoder.sandbox import SandboxConfig

    rows = table_defaults(DOCS / "sandbox.md")
    fields = dataclasses.fields(SandboxConfig)
    assert [field.name for field in fields if field.name not in rows] == []
    assert defaults_that_differ(rows, "", fields) == []


# ---------------------------------------------------------------------------------------------------------------
# Environment cards


def env_names() -> list[str]:
    from trl_ragen2_envs import ENVIRONMENTS

    return sorted(ENVIRONMENTS)


def tool_adapters(name: str) -> list[type]:
    """The `environment_factory` classes of an environment: the `*ToolEnv` classes of its module."""
    import sys

    from trl_ragen2_envs import get_env_class

    module = sys.modules[get_env_class(name).__module__]
    return [obj for attr, obj in vars(module).items() if attr.endswith("ToolEnv") and inspect.isclass(obj)]


@pytest.mark.parametrize("name", env_names())
def test_every_environment_has_a_card(name):
    card = ENV_CARDS / f"{name}.md"
    assert card.is_file(), f"no card docs/environments/{name}.md"
    text = card.read_text(encoding="utf-8")
    assert f'make_env("{name}")' in text
    assert f"environments/{name}.md" in (DOCS / "index.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("name", env_names())
def test_card_lists_the_constructor_keywords_and_tools(name):
    from trl_ragen2_envs import get_env_class

    tokens = backticked(ENV_CARDS / f"{name}.md")
    text = (ENV_CARDS / f"{name}.md").read_text(encoding="utf-8")
    keywords = [p for p in inspect.signature(get_env_class(name)).parameters if p not in ("self", "args", "kwargs")]
    missing = [keyword for keyword in keywords if not any(re.search(rf"\b{keyword}\b", token) for token in tokens)]
    adapters = tool_adapters(name)
    assert adapters, f"{name} has no *ToolEnv adapter class"
    for adapter in adapters:
        missing += [adapter.__name__] if adapter.__name__ not in text else []
        tools = [n for n, member in inspect.getmembers(adapter, inspect.isfunction)
                 if not n.startswith("_") and n not in ("reset", "get_reward")]  # fmt: skip
        assert tools, f"{adapter.__name__} exposes no tool"
        missing += [f"tool {tool}" for tool in tools if not re.search(rf"`{tool}\(", text)]
    assert missing == [], f"docs/environments/{name}.md does not mention {missing}"


def first_observation(name: str) -> str | None:
    """The observation the card shows for its example reset, computed now."""
    from trl_ragen2_envs import make_env

    if name == "webshop":
        if not HAS_1K_CATALOGUE:
            return None
        return make_env("webshop", data_dir=str(DATA_DIR), split="train").reset(seed=26)
    return make_env(name).reset(seed=0)


@pytest.mark.parametrize("name", env_names())
def test_card_example_is_what_the_environment_shows(name):
    observation = first_observation(name)
    if observation is None:
        pytest.skip("WEBSHOP_DATA_DIR holds no 1k WebShop catalogue")
    text = (ENV_CARDS / f"{name}.md").read_text(encoding="utf-8")
    head = "\n".join(observation.splitlines()[:3])  # long observations are abbreviated in the cards
    assert head in text, f"docs/environments/{name}.md does not show the current reset observation:\n{head}"


# ---------------------------------------------------------------------------------------------------------------
# "Differences from RAGEN" and "Differences from TRL's GRPOTrainer" tables

TEST_REFERENCE = re.compile(r"`((?:tests/)?test_\w+\.py)?::([\w:]+)(?:\[[^\]`]*\])?`")
CARDS_WITH_DIFFERENCE_TABLES = ("sokoban", "frozen_lake", "webshop", "searchqa", "deepcoder")


def differences_section(path: Path, title: str = "Differences from RAGEN") -> str:
    text = path.read_text(encoding="utf-8")
    start = text.find(f"\n## {title}\n")
    if start < 0:
        return ""
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else len(text)]


def table_rows_with_a_test_column(section: str) -> list[list[str]]:
    """Body rows of the section's tables whose header's last column is "Test"."""
    rows, in_table = [], False
    for line in section.splitlines():
        if not line.startswith("|"):
            in_table = False
            continue
        cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        if not in_table:
            in_table, takes_tests = True, cells[-1] == "Test"
        elif takes_tests and not set(line) <= set("|-: "):
            rows.append(cells)
    return rows


def cited_tests(cell: str) -> list[tuple[str, str]]:
    """`(file, name)` of each test a cell cites: `tests/test_x.py::name`, `test_x.py::name`, or `::name` for another
    test of the file cited just before."""
    cited, file = [], None
    for named_file, name in TEST_REFERENCE.findall(cell):
        file = named_file or file
        if file is not None:
            cited.append((file if file.startswith("tests/") else f"tests/{file}", name))
    return cited


def cited_test_exists(file: str, name: str) -> bool:
    path = ROOT / file
    if not path.is_file():
        return False
    source = path.read_text(encoding="utf-8")
    return all(re.search(rf"^\s*(def|class) {part}\b", source, re.MULTILINE) for part in name.split("::"))


DIFFERENCE_SECTIONS = [
    (DIFFERENCES_DOC, "Differences from RAGEN"),
    (DIFFERENCES_DOC, "Differences from TRL's GRPOTrainer"),
    *[(ENV_CARDS / f"{name}.md", "Differences from RAGEN") for name in CARDS_WITH_DIFFERENCE_TABLES],
]


@pytest.mark.parametrize("path, title", DIFFERENCE_SECTIONS, ids=[f"{p.name}-{t}" for p, t in DIFFERENCE_SECTIONS])
def test_every_named_difference_cites_an_existing_test(path, title):
    rows = table_rows_with_a_test_column(differences_section(path, title))
    assert rows, f"{path.name} has no '{title}' table with a Test column"
    without = [row[0] for row in rows if not cited_tests(row[-1])]
    assert without == [], f"{path.name}: rows without a test: {without}"
    missing = [f"{file}::{name}" for row in rows for file, name in cited_tests(row[-1])
               if not cited_test_exists(file, name)]  # fmt: skip
    assert missing == [], f"{path.name} cites tests that do not exist: {missing}"

"""The run browser's page in headless Chromium: every view renders the real tiny-model run, the marks are the
trainer's, model text is shown as text and its scripts never run, and a 10,000-step run's page opens fast.

Screenshots go to `test_artifacts/`; with `TRL_RAGEN2_UPDATE_FIGURES=1` also to `docs/figures/` (the docs' images).
"""

import os
import shutil
import time
from pathlib import Path

import pytest

from trl_ragen2.browser.report import build_report
from trl_ragen2.runs import keys

from .benchmark_scripts import load_benchmark
from .chromium import CHROMIUM_FLAGS, chromium_and_driver
from .run_browser_helpers import INJECTED


REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    chromium, chromedriver = chromium_and_driver()
    os.environ.setdefault("SE_OFFLINE", "true")  # never let Selenium Manager look for drivers online
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    profile = tmp_path_factory.mktemp("profile")
    for flag in [*CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--window-size=1400,1000"]:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=chromedriver), options=options)
    yield driver
    driver.quit()


def open_page(driver, path: Path) -> float:
    """Load the page and wait until its script has drawn every view; returns the seconds it took."""
    from selenium.webdriver.support.ui import WebDriverWait

    began = time.perf_counter()
    driver.get(path.resolve().as_uri())
    WebDriverWait(driver, 30).until(lambda d: d.execute_script("return document.body.dataset.ready === '1'"))
    return time.perf_counter() - began


def show(driver, view: str):
    from selenium.webdriver.common.by import By

    driver.find_element(By.CSS_SELECTOR, f'nav button[data-view="{view}"]').click()
    return driver.find_element(By.ID, view)


def screenshot(driver, name: str) -> None:
    artifacts = REPO_ROOT / "test_artifacts"
    artifacts.mkdir(exist_ok=True)
    driver.save_screenshot(str(artifacts / name))
    assert (artifacts / name).stat().st_size > 1000
    if os.environ.get("TRL_RAGEN2_UPDATE_FIGURES") == "1":
        shutil.copy(artifacts / name, REPO_ROOT / "docs" / "figures" / name)


@pytest.mark.browser
def test_every_view_renders_the_real_run_and_no_model_script_runs(driver, tiny_browser_run):
    from selenium.webdriver.common.by import By

    trainer, kept, out = tiny_browser_run
    open_page(driver, build_report(out))
    assert driver.execute_script("return window.__pwned === undefined")  # the injected scripts never ran
    curves = driver.find_element(By.ID, "view-curves")
    assert len(curves.find_elements(By.CSS_SELECTOR, ".panel svg polyline.series")) >= 3
    assert curves.find_elements(By.CSS_SELECTOR, ".panel.regime")
    screenshot(driver, "run_browser_curves.png")

    steps = show(driver, "view-steps")
    first = min(kept)
    cards = steps.find_elements(By.CSS_SELECTOR, ".group")
    assert cards and {int(c.get_attribute("data-group")): c.get_attribute("data-kept") == "1" for c in cards} == {
        int(c.get_attribute("data-group")): kept[first][int(c.get_attribute("data-group"))] for c in cards
    }
    assert INJECTED in steps.find_element(By.CSS_SELECTOR, ".group pre").get_attribute("textContent")  # as text
    assert not driver.find_elements(By.CSS_SELECTOR, "main img, main b, main script")  # no element from model text
    screenshot(driver, "run_browser_steps.png")

    mi = show(driver, "view-mi")
    matrices = mi.find_elements(By.CSS_SELECTOR, ".matrix")
    assert {m.get_attribute("data-scope") for m in matrices} == {"first_turn", "trajectory"}
    history = {entry["step"]: entry for entry in trainer.state.log_history if "loss" in entry}
    for matrix in matrices:
        rows = matrix.find_elements(By.CSS_SELECTOR, "tr[data-hit]")
        hits = [float(row.get_attribute("data-hit")) for row in rows]
        logged = history[first][keys.mi_key(matrix.get_attribute("data-scope"), "retrieval_acc")]
        assert sum(hits) / len(hits) == pytest.approx(logged, abs=1e-6)
        assert len(matrix.find_elements(By.CSS_SELECTOR, "tr.miss")) == sum(h < 1 for h in hits)
        assert matrix.find_elements(By.CSS_SELECTOR, ".pair pre")  # the chain beside its own and its best prompt
        # every chain ends with the same injected text: the chains of different groups share its trigrams
        assert len(matrix.find_elements(By.CSS_SELECTOR, ".across pre")) > 1
        assert matrix.find_elements(By.CSS_SELECTOR, ".across span.shared")
    screenshot(driver, "run_browser_mi.png")
    assert driver.execute_script("return window.__pwned === undefined")


@pytest.mark.browser
def test_a_10000_step_run_renders_every_view(driver, tmp_path):
    """A long run's page draws (its speed: `benchmarks/run_browser_page.py`)."""
    from selenium.webdriver.common.by import By

    run = tmp_path / "long"
    load_benchmark("sample_log_cost").synthetic_run(run, 10_000, samples_every=100)
    open_page(driver, build_report(run))
    assert len(driver.find_elements(By.CSS_SELECTOR, "#view-curves svg")) > 1
    assert driver.execute_script("return window.__pwned === undefined")


@pytest.mark.browser
def test_two_runs_side_by_side_step_aligned(driver, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    synthetic_run = load_benchmark("sample_log_cost").synthetic_run
    synthetic_run(tmp_path / "filtered", 50, samples_every=5)
    synthetic_run(tmp_path / "unfiltered", 50, samples_every=10)
    open_page(driver, build_report([tmp_path / "filtered", tmp_path / "unfiltered"], tmp_path / "compare.html"))
    legend = driver.find_element(By.CSS_SELECTOR, "#view-curves .panel .legend").get_attribute("textContent")
    assert "[filtered]" in legend and "[unfiltered]" in legend  # both runs on the same axes
    steps = show(driver, "view-steps")
    Select(driver.find_element(By.ID, "step-select")).select_by_value("15")
    columns = steps.find_elements(By.CSS_SELECTOR, ".col")
    assert [c.find_element(By.TAG_NAME, "h3").text for c in columns] == ["filtered", "unfiltered"]
    notes = [c.find_element(By.CSS_SELECTOR, ".notes").text for c in columns]
    assert notes[0].startswith("step 15:") and notes[1].startswith("step 10 (nearest logged before 15)")
    assert all(c.find_elements(By.CSS_SELECTOR, ".group.kept") and c.find_elements(By.CSS_SELECTOR, ".group.dropped")
               for c in columns)  # fmt: skip

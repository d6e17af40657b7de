"""WebShop web UI: page flow through Flask's test client, safety defaults, replay, and a headless Chromium run."""

import re
import sys
import threading
from pathlib import Path

import pytest


pytest.importorskip("flask")

from trl_ragen2_envs.webshop import WebShopEnv  # noqa: E402
from trl_ragen2_envs.webshop.ui.server import DEFAULT_HOST, build_parser, create_app  # noqa: E402

from .chromium import CHROMIUM_FLAGS, chromium_and_driver  # noqa: E402
from .webshop_data import index_cache_dir  # noqa: E402


REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def env_kwargs(tmp_path_factory):
    # The procedural catalogue: the UI works without any data folder.
    return {
        "procedural": True,
        "procedural_products": 300,
        "cache_dir": index_cache_dir(tmp_path_factory),
    }


def goal_with_options(env_kwargs):
    """A test-split seed whose goal has options, with the goal and the reward an agent gets for buying it."""
    env = WebShopEnv(split="test", binary_reward=False, **env_kwargs)
    seed = next(s for s in range(100) if env.shop.goal_for("test", s).goal_options)
    env.reset(seed=seed)
    goal = env.goal
    env.step(f"search[{env.shop.by_asin[goal.asin].title}]")
    env.step(f"click[{goal.asin.lower()}]")
    for _, value in goal.goal_options:
        env.step(f"click[{value}]")
    return seed, goal, env.step("click[buy now]")[1]


# ---------------------------------------------------------------------------------------------------------------
# Flask test client


def test_shopping_flow_through_the_pages(env_kwargs, tmp_path):
    seed, goal, expected_reward = goal_with_options(env_kwargs)
    client = create_app(log_dir=str(tmp_path), **env_kwargs).test_client()
    client.post("/new", data={"seed": str(seed)})
    html = client.get("/").get_data(as_text=True)
    assert 'id="search_input"' in html and goal.instruction_text.replace("'", "&#39;") in html
    client.post("/act", data={"search": goal.name})
    html = client.get("/").get_data(as_text=True)
    assert re.search(r"Page 1 \(Total results: \d+\)", html) and f'value="{goal.asin.lower()}"' in html
    client.post("/act", data={"click": goal.asin.lower()})
    name, value = goal.goal_options[0]
    client.post("/act", data={"click": value})
    html = client.get("/").get_data(as_text=True)
    assert 'id="buy-now"' in html and re.search(rf'value="{re.escape(value)}"\s+class="option selected"', html)
    for _, other in goal.goal_options[1:]:
        client.post("/act", data={"click": other})
    client.post("/act", data={"click": "description"})
    assert 'data-page="description"' in client.get("/").get_data(as_text=True)
    client.post("/act", data={"click": "< prev"})
    client.post("/act", data={"click": "buy now"})
    html = client.get("/").get_data(as_text=True)
    assert re.search(r'id="reward">([\d.]+)<', html).group(1) == f"{expected_reward:.4f}"
    assert 'id="reward-breakdown"' in html
    client.post("/act", data={"click": "buy now"})
    assert "That did nothing" in client.get("/").get_data(as_text=True)


def test_text_is_escaped_and_nothing_loads_from_outside(env_kwargs):
    client = create_app(**env_kwargs).test_client()
    client.post("/act", data={"search": "<script>alert(1)</script> shoes"})
    html = client.get("/").get_data(as_text=True)
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert not re.search(r'(src|href)="(https?:)?//', html)
    css = client.get("/static/style.css")
    assert css.status_code == 200 and "http" not in css.get_data(as_text=True)
    assert client.get("/static/no-image.svg").status_code == 200


def test_replay_shows_logged_steps(env_kwargs, tmp_path):
    client = create_app(log_dir=str(tmp_path), **env_kwargs).test_client()
    client.post("/new", data={"seed": "4"})
    client.post("/act", data={"search": "coffee"})
    client.post("/act", data={"click": "back to search"})
    (log_file,) = tmp_path.glob("*.jsonl")
    index = client.get("/replay").get_data(as_text=True)
    link = re.findall(r'href="(/replay/[^"]+)"', index)[-1]
    step1 = client.get(link + "?step=1").get_data(as_text=True)
    assert "search[coffee]" in step1 and "Total results" in step1 and "Step 1 of 2" in step1
    assert client.get(f"/replay/{log_file.name}/nope").status_code == 404
    assert client.get("/replay/..%2Fsecret.jsonl/x").status_code == 404


def test_server_binds_locally_by_default():
    args = build_parser().parse_args([])
    assert args.host == DEFAULT_HOST == "127.0.0.1" and args.port == 3000
    args = build_parser().parse_args(["--port", "8123", "--data-dir", "d", "--log-dir", "l"])
    assert (args.port, args.data_dir, args.log_dir) == (8123, "d", "l")


def test_missing_flask_names_the_extra(monkeypatch):
    from trl_ragen2_envs.webshop.ui import server

    monkeypatch.setitem(sys.modules, "flask", None)
    with pytest.raises(ImportError, match=r'pip install "trl-ragen2\[web\]"'):
        server.create_app(procedural=True)


# ---------------------------------------------------------------------------------------------------------------
# Headless Chromium


@pytest.mark.browser
def test_shopping_in_headless_chromium(env_kwargs, tmp_path, monkeypatch):
    chromium, chromedriver = chromium_and_driver()
    monkeypatch.setenv("SE_OFFLINE", "true")  # never let Selenium Manager look for drivers online
    from selenium import webdriver
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait
    from werkzeug.serving import make_server

    seed, goal, expected_reward = goal_with_options(env_kwargs)
    server = make_server("127.0.0.1", 0, create_app(log_dir=str(tmp_path / "logs"), **env_kwargs), threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_port}"
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in [*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1280,1400"]:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=chromedriver), options=options)
    try:
        # an option click reloads the page, so an element found just before the reload may go stale: look again
        wait = WebDriverWait(driver, 20, ignored_exceptions=(StaleElementReferenceException,))
        driver.get(f"{base}/new?seed={seed}")
        box = wait.until(ec.presence_of_element_located((By.ID, "search_input")))
        assert goal.instruction_text in driver.find_element(By.ID, "instruction-text").text
        box.send_keys(goal.name)
        driver.find_element(By.ID, "search-button").click()
        wait.until(ec.presence_of_element_located((By.ID, "results-header")))
        driver.find_element(By.CSS_SELECTOR, f'button.product-link[value="{goal.asin.lower()}"]').click()
        wait.until(ec.presence_of_element_located((By.ID, "buy-now")))
        assert driver.find_element(By.ID, "product-title").text == goal.name
        for name, value in goal.goal_options:
            selector = f'[data-option="{name}"] button.option[value="{value}"]'
            driver.find_element(By.CSS_SELECTOR, selector).click()
            wait.until(lambda d, s=selector: "selected" in d.find_element(By.CSS_SELECTOR, s).get_attribute("class"))
        driver.find_element(By.ID, "buy-now").click()
        reward = wait.until(ec.presence_of_element_located((By.ID, "reward"))).text
        assert reward == f"{expected_reward:.4f}"
        artifacts = REPO_ROOT / "test_artifacts"
        artifacts.mkdir(exist_ok=True)
        screenshot = artifacts / "webshop_ui_done.png"
        driver.save_screenshot(str(screenshot))
        print(f"WebShop UI screenshot: {screenshot}")  # noqa: T201 (shown with pytest -s)
        assert screenshot.stat().st_size > 1000
    finally:
        driver.quit()
        server.shutdown()

"""The gateway's web pages in a real headless browser (Debian's chromium and
chromium-driver through Selenium) against a real gateway process and redis-server: the runs
list, a live run's page that updates as the run reports steps, a trajectory with its diff,
and /docs with Swagger UI served from the package. No page may log a console error."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import time
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from etude.cli.stack import LocalStack, ServiceSpec
from etude.common.auth import bearer_header
from etude.common.run_config import parse_run_config
from etude.common.run_metrics import METRICS_FILE
from etude.common.runs import RunRegistry
from etude.common.settings import EtudeSettings, StackSettings, get_settings
from etude.common.trajectory_log import TrajectoryLog
from etude.model.tokenizer import load_tokenizer
from tests.common.test_trajectory_log import episode

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
Keys = pytest.importorskip("selenium.webdriver.common.keys").Keys
Select = pytest.importorskip("selenium.webdriver.support.ui").Select
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not (CHROMIUM and DRIVER),
        reason="no browser: apt-get install chromium chromium-driver (.ci/run does)",
    ),
]
SCREENSHOTS = os.environ.get("ETUDE_SCREENSHOTS_DIR")
"""Set: the pages' screenshots are saved there (docs/images/ui-*.png come from this)."""


@pytest.fixture
def gateway(tmp_path, monkeypatch):
    monkeypatch.setenv("ETUDE_GATEWAY__LAUNCHER", "none")  # runs are recorded, not started
    settings = EtudeSettings(stack=StackSettings(run_dir=tmp_path, ready_timeout_seconds=60))
    spec = ServiceSpec("gateway", (sys.executable, "-m", "etude.gateway"), http=True)
    stack = LocalStack(settings, (spec,))
    stack.start()
    try:
        yield stack, next(c for c in stack.state.components if c.name == "gateway").http_url
    finally:
        stack.stop()


@pytest.fixture
def browser():
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu",
                     "--disable-dev-shm-usage", "--window-size=1400,1000"):  # fmt: skip
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=DRIVER))
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def console_errors(driver) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def wait_for(driver, script: str, timeout: float = 20.0):
    """The value of `script` once it is truthy."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = driver.execute_script(script)
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"never true: {script}\n{driver.page_source[:3000]}")


def screenshot(driver, name: str) -> None:
    if SCREENSHOTS:
        Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(Path(SCREENSHOTS) / f"ui-{name}.png"))


def step_record(step: int) -> dict:
    return {"phase": "rl", "step": step, "time": time.time(), "reward_mean": 0.1 * step,
            "reward_std": 0.2, "pass_rate": 0.1 * step, "sequences": 16.0,
            "tool_calls_per_turn": 1.5, "parallel_share": 0.25,
            "reads_before_first_edit": float("nan"), "staleness_mean": 0.5, "staleness_max": 1.0,
            "tokens_per_second": 400.0 + step}  # fmt: skip


async def a_live_run(redis_url: str, output: Path) -> str:
    """A run as its driver leaves it mid-way: running, two steps reported, trajectories kept."""
    client = aioredis.Redis.from_url(redis_url)
    try:
        registry = RunRegistry(client)
        run_id = (await registry.create(parse_run_config({"name": "web"}))).run_id
        await registry.update(run_id, status="running", step=2, output_dir=str(output / run_id))
        await registry.heartbeat(run_id)
        return run_id
    finally:
        await client.aclose()


def test_the_pages_show_runs_live_curves_and_a_trajectory_s_diff(gateway, browser, tmp_path):
    stack, url = gateway
    run_id = asyncio.run(a_live_run(stack.redis_url, tmp_path / "out"))
    run_dir = tmp_path / "out" / run_id
    run_dir.mkdir(parents=True)
    evaluation = {"phase": "eval_before/tier3", "step": 0, "pass_at_1": 0.25, "ci_low": 0.17,
                  "ci_high": 0.35, "episodes": 88}  # fmt: skip
    lines = [evaluation, step_record(1), step_record(2)]
    (run_dir / METRICS_FILE).write_text("".join(json.dumps(r) + "\n" for r in lines))
    tokenizer = load_tokenizer()
    TrajectoryLog(run_dir, tokenizer, keep=1.0).write(
        2, [[episode(tokenizer, "stats-1", 1.0, 0), episode(tokenizer, "stats-1", 0.0, 1)]]
    )
    token = bearer_header(get_settings().auth, "operator")["Authorization"].split()[1]

    browser.get(f"{url}/ui#token={token}")
    assert (
        wait_for(browser, "return document.querySelector('#runs-table a')?.textContent") == run_id
    )
    screenshot(browser, "runs")
    assert console_errors(browser) == []

    browser.find_element("css selector", "#runs-table a").click()
    line = "document.querySelector('polyline[data-series=\"mean reward\"]')"
    points = f"return {line}?.getAttribute('points')"
    assert len(wait_for(browser, points).split()) == 2
    assert wait_for(
        browser, "return document.querySelector('rect[data-series^=\"held-out\"]') !== null"
    )
    with (run_dir / METRICS_FILE).open("a") as out:  # the run reports a third step
        out.write(json.dumps(step_record(3)) + "\n")
    wait_for(browser, f"return {line}?.getAttribute('points').split(' ').length === 3")
    assert wait_for(browser, "return document.querySelectorAll('a.trajectory-link').length") == 2
    screenshot(browser, "run")
    assert console_errors(browser) == []

    # The table's filters: the best first, then one step only; the address keeps them.
    rewards = "[...document.querySelectorAll('#trajectories td:nth-child(4)')]"
    rewards += ".map(td => td.textContent).join(' ')"
    nothing_kept = "return document.querySelector('#trajectories p.muted') !== null"
    assert wait_for(browser, f"return {rewards}") == "0 1"
    Select(browser.find_element("css selector", "[name=order]")).select_by_value("best")
    wait_for(browser, f"return {rewards} === '1 0'")
    step = browser.find_element("css selector", "[name=step]")
    step.send_keys("1", Keys.TAB)  # no trajectory was kept at step 1
    wait_for(browser, nothing_kept)
    browser.refresh()
    wait_for(browser, nothing_kept)
    assert "order=best" in browser.current_url and "step=1" in browser.current_url
    step = browser.find_element("css selector", "[name=step]")
    assert step.get_attribute("value") == "1"
    step.clear()
    step.send_keys(Keys.TAB)
    Select(browser.find_element("css selector", "[name=order]")).select_by_value("worst")
    wait_for(browser, f"return {rewards} === '0 1'")
    assert console_errors(browser) == []

    browser.find_element("css selector", "a.trajectory-link").click()  # the worst first
    diff = wait_for(browser, "return document.querySelector('#diff-text .add')?.textContent")
    assert diff.strip() == "+return total / n"
    calls = browser.execute_script(
        "return [...document.querySelectorAll('.batch .call b')].map(b => b.textContent)"
    )
    assert calls == ["read_file"]
    assert "✗ tests/test_stats.py::test_mean" in browser.find_element("id", "tests").text
    screenshot(browser, "trajectory")
    assert console_errors(browser) == []


def test_api_docs_load_without_a_cdn(gateway, browser):
    _, url = gateway
    browser.get(f"{url}/docs")
    assert wait_for(browser, "return document.querySelectorAll('.opblock').length") >= 5
    scripts = browser.execute_script("return [...document.scripts].map(s => s.src).filter(Boolean)")
    assert scripts and all(src.startswith(url) for src in scripts), scripts
    assert console_errors(browser) == []

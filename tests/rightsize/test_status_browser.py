"""The status page in a real headless Chromium, against agents running plans.

What a person would see: plans in flight, a plan's state changing on screen without a
reload, a failed job with its reason, and what the Re-scheduler did about it. The agents
are the real Scheduler on the in-process bus and SQLite; the cluster is the simulated one
on a manual clock (``tests/agents/harness.py``), so minutes of job time pass in
milliseconds. Chromium and its driver are Debian's (``scripts/browser/install.sh``).

``RIGHTSIZE_STATUS_SCREENSHOT=docs/status-page.png`` keeps the screenshot for the docs,
``RIGHTSIZE_STATUS_TERMINAL=FILE`` what ``rightsize center status`` printed.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.remote.webdriver import WebDriver
from typer.testing import CliRunner

from agents.events import EstimatorDecision, PlanApproved, ScheduleDecision
from agents.scheduler import Scheduler, SchedulerConfig
from knowledge_base.records import EstimatorRecord, EstimatorStatus, Plan
from rightsize.cli import app
from rightsize.observability.feed import EventFeed
from rightsize.observability.server import Access, Observed, serving, status_app
from tests.agents.harness import MiniCenter, dnn_spec, generic_spec, make_plan, until
from tests.conftest import FIXTURES, missing_service
from tools.actuators.model import JobRequest, SimulatedWork

pytestmark = pytest.mark.browser

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1440,1800",
)


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[WebDriver]:
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not chromium or not driver:
        missing_service("chromium/chromedriver not installed (scripts/browser/install.sh as root)")
    assert chromium is not None and driver is not None
    options = Options()
    options.binary_location = chromium
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path / 'chromium-profile'}")
    chrome = webdriver.Chrome(service=Service(driver), options=options)
    chrome.set_page_load_timeout(30)
    try:
        yield chrome
    finally:
        chrome.quit()


def behaviour(request: JobRequest) -> SimulatedWork:
    """How each plan's jobs behave on the simulated cluster (its model of them)."""
    if request.plan_id == "plan-oom":  # 2.9 GB in a 2 GB job: killed, then fits in 3 GB
        return SimulatedWork(run_s=100, peak_memory_mb=2900)
    if request.plan_id == "plan-never-fits":  # more than any node has: given up with the reason
        return SimulatedWork(run_s=100, peak_memory_mb=30000)
    if request.plan_id == "plan-long":
        return SimulatedWork(run_s=550, peak_memory_mb=500)
    return SimulatedWork(run_s=45, peak_memory_mb=100)  # the cascade's segments


def plans() -> list[Plan]:
    return [
        make_plan("plan-oom", generic_spec(), partition="batch", memory_mb=2048, walltime_s=300),
        make_plan("plan-cascade", dnn_spec(), segments=3),
        make_plan("plan-never-fits", generic_spec(), partition="batch", memory_mb=16000,
                  walltime_s=300),
        make_plan("plan-long", dnn_spec(), partition="batch", walltime_s=600, segments=4),
    ]  # fmt: skip


async def text_of(browser: WebDriver, css: str) -> list[str]:
    """What a person reads at ``css`` now (read in one go: the page re-renders as it polls)."""
    script = "return [...document.querySelectorAll(arguments[0])].map((e) => e.innerText);"
    texts = await asyncio.to_thread(browser.execute_script, script, css)
    return [str(x).strip() for x in texts]


async def on_screen(
    browser: WebDriver,
    css: str,
    wanted: Callable[[list[str]], bool],
    *,
    what: str,
    timeout_s: float = 30,
) -> list[str]:
    """Until what the page shows at ``css`` is ``wanted`` (the page polls on its own)."""
    deadline = time.monotonic() + timeout_s
    while True:
        texts = await text_of(browser, css)
        if wanted(texts):
            return texts
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: the page shows {texts!r} at {css!r} after {timeout_s} s")
        await asyncio.sleep(0.1)


async def test_the_page_follows_plans_live_and_shows_why_a_job_failed(
    browser: WebDriver, tmp_path: Path
) -> None:
    async with MiniCenter(tmp_path) as center:
        # Start the simulated clock at the present, so jobs' elapsed times read true.
        center.clock.advance((datetime.now(UTC) - center.clock.now()).total_seconds())
        center.cluster.model = behaviour
        scheduler = Scheduler(
            center.kb,
            {"testcluster": center.cluster},
            center.bus,
            SchedulerConfig(checkpoint_overhead_s=10),
        )
        await center.start(scheduler)
        # A served estimator, and Model Promotion's last look at it, for the page to compare.
        await center.kb.put_estimator(
            EstimatorRecord(
                id="history-runtime-2",
                kind="history",
                target="runtime_s",
                status=EstimatorStatus.PROMOTED,
                validation={"log": 0.412},
                training_rows=3000,
            )
        )

        async def step() -> None:
            center.clock.advance(5)
            await scheduler.monitors["testcluster"].poll_once()
            await center.settle()

        async def status_of(plan_id: str) -> str:
            return str((await center.kb.get_plan(plan_id)).status)

        async def run_until(done: Callable[[], Awaitable[bool]], what: str) -> None:
            await until(done, step, steps=400, what=what)

        async with EventFeed(center.bus) as feed:
            observed = Observed(
                kb=center.kb,
                runners=lambda: center.runners,
                feed=feed,
                simulations_dir=FIXTURES / "status",  # a saved `rightsize simulate --json`
            )
            async with serving(status_app(observed, Access()), "127.0.0.1", 0) as port:
                for plan in plans():
                    await center.publish(PlanApproved(plan=plan), plan.id)
                await center.publish(LOOKED_AT, "runtime_s")
                await center.settle()
                await run_until(lambda: _is(status_of("plan-oom"), "running"), "running")
                url = f"http://127.0.0.1:{port}/?interval_ms=200"
                await asyncio.to_thread(browser.get, url)
                oom_state = "tr[data-plan-id='plan-oom'] .plan-state"
                await on_screen(browser, oom_state, lambda t: t == ["running"], what="in flight")
                await asyncio.to_thread(browser.execute_script, "window.loadedOnce = true;")

                # The first job runs out of memory: the page lists it with its reason, and
                # what the Re-scheduler did about it.
                async def oom_killed() -> bool:
                    decisions = await center.recorder.of(ScheduleDecision)
                    return any(d.action == "more_memory" for d in decisions)

                await run_until(oom_killed, "the OOM kill")
                failures = await on_screen(
                    browser,
                    "li.failure",
                    lambda t: any("out_of_memory" in x and "plan-oom" in x for x in t),
                    what="the OOM kill",
                )
                oom = next(x for x in failures if "plan-oom" in x)
                assert "memory" in oom.split(":", 1)[1]  # the reason, not just the state
                decisions = await on_screen(
                    browser,
                    "li.decision",
                    lambda t: any("more memory" in x and "plan-oom" in x for x in t),
                    what="the resubmission",
                )
                assert any("ran out of memory with 2.0 GB" in x for x in decisions)

                # The same rows change state on screen; the page never reloaded.
                for plan_id, final in [
                    ("plan-oom", "completed"),
                    ("plan-never-fits", "failed"),
                    ("plan-cascade", "completed"),
                ]:
                    await run_until(lambda p=plan_id, f=final: _is(status_of(p), f), plan_id)
                    await on_screen(
                        browser,
                        f"tr[data-plan-id='{plan_id}'] .plan-state",
                        lambda t, f=final: t == [f],
                        what=f"{plan_id} {final}",
                    )
                estimator = await on_screen(
                    browser, "tr[data-estimator]", bool, what="the estimator"
                )
                assert "0.412" in estimator[0] and "0.455" in estimator[0]  # validation, live
                simulations = await text_of(browser, "#simulations")
                assert "sdsc-sp2-easy-vs-fcfs" in simulations[0] and "easy" in simulations[0]
                reason = await text_of(browser, "tr[data-plan-id='plan-never-fits'] .reason")
                assert reason and reason[0], "a failed plan says why"
                assert await text_of(browser, "tr[data-plan-id='plan-long'] .plan-state") == [
                    "running"
                ]
                assert await asyncio.to_thread(
                    browser.execute_script, "return window.loadedOnce === true;"
                )
                # The terminal shows the same picture (`rightsize center status`).
                said = await asyncio.to_thread(
                    CliRunner().invoke,
                    app,
                    ["center", "status", "--url", f"http://127.0.0.1:{port}"],
                    env={"COLUMNS": "150"},
                )
                assert said.exit_code == 0, said.output
                assert "plan-never-fits" in said.stdout and "more_memory" in said.stdout
                if os.environ.get("RIGHTSIZE_STATUS_TERMINAL"):
                    Path(os.environ["RIGHTSIZE_STATUS_TERMINAL"]).write_text(said.stdout)
                await asyncio.sleep(0.5)  # one more poll: the screenshot shows the last state
                shot = Path(os.environ.get("RIGHTSIZE_STATUS_SCREENSHOT", tmp_path / "s.png"))
                shot.parent.mkdir(parents=True, exist_ok=True)
                assert await asyncio.to_thread(browser.save_screenshot, str(shot))


LOOKED_AT = EstimatorDecision(
    target="runtime_s",
    decision="no_drift",
    reason="live error 0.455 within 1.5 x validation 0.412 over 40 jobs",
    estimator_id="history-runtime-2",
    live_error=0.455,
    validation_error=0.412,
    jobs=40,
    metric="log",
)


async def _is(value: Awaitable[str], wanted: str) -> bool:
    return await value == wanted

"""The dashboard in headless Chromium, served by a leader's status app running in-process
on the in-memory adapters: the grid shows the published assignment, and follows a
rebalance live (over /events, without a reload)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from fastapi import FastAPI

from core.model import Assignment
from services.leader.dashboard import mount_dashboard
from tests.browser._stack import (
    PARTITIONS,
    CannedSource,
    Stack,
    balanced_over,
    in_process_stack,
    serve_app,
)
from tests.browser.conftest import artifact

if TYPE_CHECKING:
    from playwright.async_api import Page

pytestmark = pytest.mark.anyio

CELLS_JS = "els => els.map(e => [Number(e.dataset.partition), e.dataset.owner])"


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    async with in_process_stack(tmp_path) as stack:
        yield stack


def owners_of(assignment: Assignment) -> list[list[Any]]:
    return [[p, ",".join(owners)] for p, owners in enumerate(assignment.owners)]


async def wait_for_generation(page: Page, generation: int) -> None:
    # Selectors, not wait_for_function: the page's CSP (no 'unsafe-eval') refuses the
    # string evaluation wait_for_function relies on, and the test keeps that CSP on.
    await page.wait_for_selector(
        f'#partition-grid[data-generation="{generation}"][data-partitions="{PARTITIONS}"]',
        state="attached",
        timeout=15_000,
    )


async def test_grid_shows_the_owner_of_every_partition_and_follows_a_rebalance_live(
    stack: Stack, page: Page
) -> None:
    leader = await stack.start_leader("leader-1")
    for handler in ("h1", "h2", "h3"):
        await stack.start_handler(handler)
    assignment = await stack.assignment_where(balanced_over("h1", "h2", "h3"))
    await stack.publish(300)

    await page.goto(stack.url + "/")
    await wait_for_generation(page, assignment.generation)
    cells = await page.eval_on_selector_all("#partition-grid [data-partition]", CELLS_JS)
    assert cells == owners_of(assignment)
    assert await page.text_content("#leader-id") == "leader-1"
    assert leader.leadership is not None
    assert await page.text_content("#leader-term") == str(leader.leadership.term)
    assert await page.get_attribute("#served-by", "data-role") == "active"
    rows = await page.eval_on_selector_all(
        "#members-body tr[data-member]", "rows => rows.map(r => r.dataset.member)"
    )
    assert rows == ["h1", "h2", "h3"]
    legend = await page.eval_on_selector_all(
        "#legend li[data-member]", "items => items.map(i => i.textContent)"
    )
    assert legend == [f"{m} ({len(assignment.owned_by(m))})" for m in ("h1", "h2", "h3")], (
        "the legend names each owner with its partition count"
    )
    assert await page.get_attribute("#scaling", "data-state") in ("absent", "empty", "present")
    # Every message landed: the handlers report their rates within a stats interval.
    await page.wait_for_selector(
        '#throughput:not([data-rate="0"]):not([data-rate=""])', timeout=10_000
    )
    await page.screenshot(path=artifact("dashboard.png"))

    # A handler dies: the page follows the new generation on its own.
    stack.crash("h2")
    after = await stack.assignment_where(balanced_over("h1", "h3"))
    await wait_for_generation(page, after.generation)
    cells = await page.eval_on_selector_all("#partition-grid [data-partition]", CELLS_JS)
    assert cells == owners_of(after)
    assert not await page.query_selector_all('[data-owner="h2"]')
    moved = await page.get_attribute(
        f'#rebalances li[data-generation="{after.generation}"]', "data-moved"
    )
    assert moved == str(len(assignment.owned_by("h2")))
    await page.screenshot(path=artifact("dashboard-after-crash.png"))


NOW = time.time()

CANNED: dict[str, Any] = {
    "leader": {"id": "leader-a", "term": 4},
    "served_by": {"id": "leader-b", "active": False},
    "generation": 9,
    "members": [
        {"id": "h1", "partitions": 3, "cpu": 97.0, "project_count": 60, "rate": 10.0},
        {"id": "h2", "partitions": 1, "cpu": 5.0, "project_count": 2, "rate": 2.5},
    ],
    "partitions": [
        {"partition": 0, "owner": "h1", "generation": 9, "lag": 12000, "holder": "h1"},
        {"partition": 1, "owner": "h1", "generation": 9, "lag": 0, "holder": "h2"},
        {"partition": 2, "owner": "h1", "generation": 9, "lag": None, "holder": None},
        {"partition": 3, "owner": None, "generation": 9, "lag": 5, "holder": None},
        {"partition": 4, "owner": ["h1", "h2"], "generation": 9, "lag": 1, "holder": None},
    ],
    "rebalances": [
        {
            "at": NOW - 30,
            "generation": 9,
            "members": 2,
            "moved": 2,
            "revoked": {"h2": [0, 1]},
            "granted": {"h1": [0, 1]},
            "compute_seconds": 0.0004,
            "handoff_seconds": 1.5,
        }
    ],
    "scaling": {
        "enabled": True,
        "scaler": "local",
        "replicas": 2,
        "min_replicas": 2,
        "max_replicas": 10,
        "cooldown_left": 420.0,
        "decisions": [
            {
                "at": NOW - 10,
                "decision": "up",
                "rule": "cpu",
                "reason": "scale up: h1 cpu 97.0 >= 90",
                "replicas_before": 2,
                "replicas_after": 3,
                "target": 3,
                "handlers": 2,
                "total_lag": 12006,
                "error": None,
            },
            {
                "at": NOW - 70,
                "decision": "hold",
                "rule": "steady",
                "reason": "hold: <b>no rule applies</b>",
                "replicas_before": 2,
                "replicas_after": 2,
                "target": 2,
                "handlers": 2,
                "total_lag": 0,
                "error": None,
            },
        ],
    },
}


async def test_canned_document_renders_lag_handoff_rebalance_and_scaling(page: Page) -> None:
    app = FastAPI()
    source = CannedSource(CANNED)
    mount_dashboard(app, source)
    app.get("/status")(source.document)
    async with serve_app(app) as url:
        await page.goto(url + "/dashboard")
        await wait_for_partitions(page, 5)
        assert await page.get_attribute("#p-0", "data-lag") == "12000"
        assert await page.text_content("#p-0 .lag") == "12k"
        assert await page.get_attribute("#p-2", "data-lag") == ""
        assert await page.get_attribute("#p-3", "data-owner") == ""
        assert await page.get_attribute("#p-4", "data-owner") == "h1,h2"
        assert "moving" in (await page.get_attribute("#p-1", "class") or "")
        assert await page.text_content("#total-lag") == "12,006"
        assert await page.text_content("#throughput") == "12.5 msg/s"
        assert await page.get_attribute("#served-by", "data-role") == "standby"
        assert await page.get_attribute("#members-body tr[data-member=h1]", "class") == "hot"
        rebalance = await page.text_content('#rebalances li[data-generation="9"]') or ""
        assert "moved 2" in rebalance and "handoff took 1.5 s" in rebalance
        assert "+2" in rebalance and "\u22122" in rebalance  # U+2212 MINUS SIGN
        assert await page.get_attribute("#scaling", "data-state") == "present"
        decisions = await page.eval_on_selector_all(
            "#scaling li", "items => items.map(i => [i.dataset.rule, i.textContent])"
        )
        assert [rule for rule, _ in decisions] == ["cpu", "steady"]
        assert "scale up 2 → 3" in decisions[0][1]
        assert "h1 cpu 97.0 >= 90" in decisions[0][1]
        assert "<b>no rule applies</b>" in decisions[1][1], "reasons are text, never HTML"
        assert "cooldown 420 s left" in (await page.text_content("#scaling-summary") or "")
        await page.screenshot(path=artifact("dashboard-canned.png"))

        # The section disappears gracefully from a leader that has none.
        source.document_value = {k: v for k, v in CANNED.items() if k != "scaling"}
        await page.wait_for_selector(
            '#scaling[data-state="absent"]', state="attached", timeout=5_000
        )
        assert await page.is_visible("#scaling-empty")


async def wait_for_partitions(page: Page, count: int) -> None:
    await page.wait_for_selector(
        f'#partition-grid[data-partitions="{count}"]', state="attached", timeout=10_000
    )

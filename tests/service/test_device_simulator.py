"""The device simulator (``shoal devices``): it says why nothing is accepted, and with
``retry_after_stop=False`` a stop ends its retries instead of running them out."""

from __future__ import annotations

import anyio
import httpx
import pytest
from typer.testing import CliRunner

from infra.local.servers import free_port
from services.cli.devices import LoadGenerator, LoadPlan, run_devices
from services.cli.main import app

pytestmark = pytest.mark.anyio

PLAN = LoadPlan(messages=None, projects=3, batch=5, concurrency=4, keep_ids=False)


async def test_a_stop_ends_the_retries_of_an_unreachable_gateway_and_names_the_error() -> None:
    plan = LoadPlan(**{**PLAN.__dict__, "retry_after_stop": False})
    gateway = f"http://127.0.0.1:{free_port()}"  # nothing listens
    summary = await run_devices(gateway, plan, 1.0, lambda summary, elapsed: None)
    assert summary.accepted_count == 0
    assert summary.failed_batches == plan.concurrency, "each worker's batch given up"
    assert summary.attempts < plan.concurrency * plan.max_attempts, "retries ended at the stop"
    assert summary.last_error.startswith(f"no answer from {gateway}: ConnectError")


@pytest.mark.parametrize("retry_after_stop", [True, False])
async def test_a_stop_during_a_retry_finishes_the_batch_only_when_the_plan_says_so(
    retry_after_stop: bool,
) -> None:
    stop = anyio.Event()
    answers = iter([503, 503, 202])

    def gateway(request: httpx.Request) -> httpx.Response:
        stop.set()  # stopped while the first batch is being answered
        if next(answers) == 503:
            return httpx.Response(503, headers={"retry-after": "0"}, json={"error": "busy"})
        return httpx.Response(202, json={"message_ids": [f"m{i}" for i in range(5)]})

    plan = LoadPlan(**{**PLAN.__dict__, "concurrency": 1, "retry_after_stop": retry_after_stop})
    generator = LoadGenerator("http://gw", plan, http_transport=httpx.MockTransport(gateway))
    summary = await generator.run(stop)
    assert summary.last_error == 'HTTP 503: {"error":"busy"}'
    if retry_after_stop:
        assert (summary.accepted_count, summary.retried, summary.failed_batches) == (5, 2, 0)
    else:
        assert (summary.accepted_count, summary.attempts, summary.failed_batches) == (0, 1, 1)


def test_shoal_devices_exits_1_naming_why_nothing_was_accepted() -> None:
    gateway = f"http://127.0.0.1:{free_port()}"
    result = CliRunner().invoke(app, ["devices", "--gateway", gateway, "--duration", "1"])
    assert result.exit_code == 1
    assert "batches not accepted; the last error: no answer from" in result.output
    assert gateway in result.output


async def test_wait_refused_returns_once_the_gateway_pushed_back_that_often() -> None:
    stop = anyio.Event()

    def gateway(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503, headers={"retry-after": "0"}, json={"error": "stream full"})

    plan = LoadPlan(**{**PLAN.__dict__, "concurrency": 2, "retry_after_stop": False})
    generator = LoadGenerator("http://gw", plan, http_transport=httpx.MockTransport(gateway))
    async with anyio.create_task_group() as tg:
        tg.start_soon(generator.run, stop)
        with anyio.fail_after(10):
            await generator.wait_refused(503, 6)
        assert generator.summary.rejected[503] >= 6
        assert generator.summary.rejected[429] == 0
        stop.set()
    with anyio.fail_after(1):
        await generator.wait_refused(429, 1)  # the run ended: nobody waits for ever

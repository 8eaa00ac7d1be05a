"""The console's uvicorn embedding (runstore/server/console/server.py) against
the installed uvicorn, which runstore-server caps at the newest release tested.

uvicorn's public ``Server.serve()`` takes over SIGTERM and SIGINT for as long
as it runs, so the console drives its steps instead (``Config.load``,
``lifespan_class``, ``startup(sockets=)``, ``main_loop``,
``shutdown(sockets=)``). These tests hold what that buys, so raising the cap
is one run of this file: the steps exist with the arguments used, the
server's own signal handlers stay in place, and shutdown lets a page load in
flight finish, yet cuts one that outlasts the grace period.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import inspect
import logging
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from packaging.requirements import Requirement

from tests.console.support import console_server


def test_the_installed_uvicorn_is_within_the_declared_range() -> None:
    (declared,) = [
        Requirement(line)
        for line in importlib.metadata.requires("runstore-server") or []
        if Requirement(line).name == "uvicorn"
    ]
    installed = importlib.metadata.version("uvicorn")
    assert declared.specifier.contains(installed), (str(declared), installed)


def test_the_steps_the_console_drives_exist_with_its_arguments() -> None:
    assert callable(uvicorn.Config.load)
    config = uvicorn.Config(app=lambda *_: None, lifespan="off")
    config.load()
    assert config.lifespan_class is not None
    for step in ("startup", "shutdown"):
        assert "sockets" in inspect.signature(getattr(uvicorn.Server, step)).parameters, step
    assert not inspect.signature(uvicorn.Server.main_loop).parameters.keys() - {"self"}
    assert hasattr(uvicorn.Server, "should_exit") or "should_exit" in vars(uvicorn.Server(config))


async def test_the_console_leaves_the_servers_signal_handlers_alone(tmp_path: Path) -> None:
    before = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    async with console_server(tmp_path) as under:
        async with httpx.AsyncClient(base_url=under.base, timeout=30) as http:
            assert (await http.get("/healthz")).text == "ok"
        during = {signum: signal.getsignal(signum) for signum in before}
    assert during == before


async def _held_page(under: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[asyncio.Event, Any]:
    """A run page whose read waits for the returned event; the started request."""
    run = await under.store.root(agent_id="slow-page")
    store = under.running.console.console.store
    original = store.list_run_records
    entered, release = asyncio.Event(), asyncio.Event()

    async def held(run_id: str, cursor: str, limit: int) -> Any:
        entered.set()
        await release.wait()
        return await original(run_id, cursor, limit)

    monkeypatch.setattr(store, "list_run_records", held)
    http = httpx.AsyncClient(base_url=under.base, timeout=60, headers=under.bearer())
    request = asyncio.ensure_future(http.get("/run", params={"id": run.id}))
    async with asyncio.timeout(30):
        await entered.wait()
    return release, (http, request)


async def test_shutdown_lets_a_page_load_in_flight_finish(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with console_server(tmp_path) as under:
        console = under.running.console
        assert console is not None
        release, (http, request) = await _held_page(under, monkeypatch)
        stopping = asyncio.ensure_future(console.stop())
        await asyncio.sleep(0)  # the stop has begun: no new connection is taken
        assert not stopping.done()
        release.set()
        answer = await asyncio.wait_for(request, 30)
        await asyncio.wait_for(stopping, 30)
        await http.aclose()
        under.running.console = None  # stopped already
    assert answer.status_code == 200 and "slow-page" in answer.text


async def test_shutdown_cuts_a_page_load_that_outlasts_the_grace_period(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async with console_server(tmp_path) as under:
        console = under.running.console
        assert console is not None
        console.server.config.timeout_graceful_shutdown = 0.2
        release, (http, request) = await _held_page(under, monkeypatch)
        with caplog.at_level(logging.ERROR, logger="uvicorn.error"):
            await asyncio.wait_for(console.stop(), 30)  # returns though the page never does
        assert not release.is_set()
        try:
            answer = await asyncio.wait_for(request, 30)
        except httpx.HTTPError:
            cut = True
        else:
            cut = answer.status_code == 500  # uvicorn's answer for a cancelled app
        assert cut
        await http.aclose()
        under.running.console = None
    assert any("graceful shutdown exceeded" in r.getMessage() for r in caplog.records)

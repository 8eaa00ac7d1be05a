"""The console over plain HTTP: access on every route, sign-in, escaping, CSP,
paging from the tail, live streams and shutdown. A real socket every time (an
in-process ASGI transport buffers server-sent events whole)."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import ssl
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import httpx
import pytest

from runstore.contract.model import RunStatus
from runstore.server.app import ListenError, build_server, create_stores, open_database, shutdown
from runstore.server.auth import SecurityError
from runstore.server.config import ServerConfig
from runstore.server.console import reads, stores, views
from runstore.server.console.server import check_exposure
from runstore.server.core import listing, paging
from runstore.v1 import context_store_pb2 as ctx
from runstore.v1 import memory_store_pb2 as ms
from runstore.v1 import runtime_store_pb2 as rs
from runstore.v1 import seeds_pb2 as sd
from runstore.v1 import types_pb2 as pb
from tests.certs import Authority
from tests.console.support import (
    ELSEWHERE,
    SCRIPT_PAYLOAD,
    ConsoleUnderTest,
    console_server,
    seed,
    seed_long_run,
    seed_session_runs,
)
from tests.secured import write_auth_file
from tests.seeds import Upload, declaration, part
from tests.support import now_ms, run_start, started_record, ts, unique

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)


@pytest.fixture(scope="module")
async def console(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ConsoleUnderTest]:
    async with console_server(tmp_path_factory.mktemp("console")) as under:
        await seed(under)
        yield under


def _screens(under: ConsoleUnderTest) -> list[tuple[str, dict[str, str]]]:
    seeded = under.seeded
    assert seeded.root is not None
    return [
        ("/sessions", {}),
        ("/sessions", {"id": seeded.session_id[:10]}),
        ("/session", {"id": seeded.session_id}),
        ("/runs", {}),
        ("/run", {"id": seeded.root.id}),
        ("/run", {"id": seeded.root.id, "view": "transcript"}),
        ("/run", {"id": seeded.root.id, "view": "timeline"}),
        ("/memory", {"agent": "planner", "run": seeded.root.id}),
        ("/context", {"key": seeded.session_id}),
        ("/run/events", {"id": seeded.root.id, "after": "0"}),
        ("/session/events", {"id": seeded.session_id, "after": "0"}),
    ]


async def test_no_request_without_a_principal_gets_data(console: ConsoleUnderTest) -> None:
    """Every screen and stream refuses a request with no credential, a wrong
    token, a malformed header, or a worker's token (workers may not read
    sessions over gRPC either), and never shows the seeded IDs."""
    assert console.seeded.root is not None
    secrets_ = (console.seeded.session_id, console.seeded.root.id)
    refusals = [
        ({}, 401),
        ({"authorization": "Bearer not-a-token"}, 401),
        ({"authorization": f"Basic {console.tokens['reader']}"}, 401),
        ({"cookie": "runstore_console=forged"}, 401),
        (console.bearer("worker"), 403),
    ]
    async with httpx.AsyncClient(base_url=console.base, timeout=30) as http:
        for path, params in _screens(console):
            for headers, status in refusals:
                response = await http.get(path, params=params, headers=headers)
                assert response.status_code == status, (path, headers)
                assert not any(secret in response.text for secret in secrets_), path
            # A reader of team-b only: refused default (403), and shown team-b
            # (which does not exist here: 404) when the URL names no namespace.
            for namespace, status in (("default", 403), ("", 404)):
                response = await http.get(
                    path,
                    params={**params, "namespace": namespace},
                    headers=console.bearer(ELSEWHERE),
                )
                assert response.status_code == status, (path, namespace)
                assert not any(secret in response.text for secret in secrets_), path
            for role in ("reader", "host", "admin"):
                if path.endswith("/events"):
                    continue  # streams are read below
                response = await http.get(path, params=params, headers=console.bearer(role))
                assert response.status_code == 200, (path, role)


async def test_a_page_without_a_principal_sends_a_browser_to_sign_in(
    console: ConsoleUnderTest,
) -> None:
    async with httpx.AsyncClient(base_url=console.base, timeout=30) as http:
        response = await http.get(
            "/session", params={"id": console.seeded.session_id}, headers={"accept": "text/html"}
        )
    assert response.status_code == 303
    location = response.headers["location"]
    assert location.startswith("/login?next=%2Fsession%3Fid%3D")
    assert console.seeded.session_id not in response.text


async def test_health_and_static_assets_are_open(console: ConsoleUnderTest) -> None:
    async with httpx.AsyncClient(base_url=console.base, timeout=30) as http:
        assert (await http.get("/healthz")).text == "ok"
        script = await http.get("/static/console.js")
        style = await http.get("/static/console.css")
    assert script.status_code == 200 and "EventSource" in script.text
    assert "innerHTML" not in script.text
    assert style.status_code == 200 and style.headers["content-type"].startswith("text/css")


async def test_every_response_carries_the_content_security_policy(
    console: ConsoleUnderTest,
) -> None:
    async with httpx.AsyncClient(base_url=console.base, timeout=30) as http:
        responses = [
            await http.get(path, params=params, headers=console.bearer())
            for path, params in _screens(console)
            if not path.endswith("/events")
        ]
        responses += [await http.get("/login"), await http.get("/sessions"), await http.get("/x")]
    for response in responses:
        assert response.headers["content-security-policy"] == CSP
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["x-frame-options"] == "DENY"


async def test_pages_have_no_inline_script_or_style(console: ConsoleUnderTest) -> None:
    async with httpx.AsyncClient(base_url=console.base, timeout=30) as http:
        for path, params in _screens(console):
            if path.endswith("/events"):
                continue
            html = (await http.get(path, params=params, headers=console.bearer())).text
            assert re.findall(r"<script[^>]*>", html) == ['<script src="/static/console.js" defer>']
            assert "<style" not in html and " style=" not in html
            tags = re.findall(r"<[a-z][^>]*>", html)
            assert not [tag for tag in tags if re.search(r"\son[a-z]+=", tag)], path


async def test_hostile_payloads_are_text(console: ConsoleUnderTest) -> None:
    """A payload holding a script tag or an attribute-breaking image shows escaped."""
    seeded = console.seeded
    assert seeded.root is not None and seeded.transcript_run is not None
    async with httpx.AsyncClient(base_url=console.base, timeout=30) as http:
        run = (await http.get("/run", params={"id": seeded.root.id}, headers=console.bearer())).text
        session = (
            await http.get("/session", params={"id": seeded.session_id}, headers=console.bearer())
        ).text
        transcript = (
            await http.get(
                "/run",
                params={"id": seeded.transcript_run.id, "view": "transcript"},
                headers=console.bearer(),
            )
        ).text
    for html in (run, session):
        assert "&lt;script&gt;window.__xss=1&lt;/script&gt;" in html
        assert "<script>window" not in html
        assert "<img" not in html
    assert "&lt;img src=x onerror=window.__xss=3&gt;" in transcript
    assert "<img" not in transcript


async def test_the_run_page_shows_its_lifecycle(console: ConsoleUnderTest) -> None:
    seeded = console.seeded
    assert seeded.suspended and seeded.successor and seeded.canceled and seeded.child
    async with httpx.AsyncClient(
        base_url=console.base, timeout=30, headers=console.bearer()
    ) as http:
        suspended = (await http.get("/run", params={"id": seeded.suspended.id})).text
        successor = (await http.get("/run", params={"id": seeded.successor.id})).text
        canceled = (await http.get("/run", params={"id": seeded.canceled.id})).text
        assert seeded.root is not None
        root = (await http.get("/run", params={"id": seeded.root.id})).text
    assert "checkpoint-1" in suspended and "approval" in suspended
    assert f'href="/run?id={seeded.successor.id}"' in suspended  # successor
    assert f'href="/run?id={seeded.suspended.id}"' in successor  # predecessor
    assert "user_requested" in canceled and "cancel-by-operator" in canceled
    assert f'href="/run?id={seeded.child.id}"' in root  # children


async def test_the_transcript_pairs_each_tool_call_with_its_result(
    console: ConsoleUnderTest,
) -> None:
    assert console.seeded.transcript_run is not None
    async with httpx.AsyncClient(base_url=console.base, timeout=30) as http:
        html = (
            await http.get(
                "/run",
                params={"id": console.seeded.transcript_run.id, "view": "transcript"},
                headers=console.bearer(),
            )
        ).text
    call = html[html.index('<div class="tool-call">') :]
    call = call[: call.index("</article>")]
    assert "weather.lookup" in call and "tool-call-1" in call
    assert "&#34;sky&#34;: &#34;clear&#34;" in call  # the result, inside the call's block
    assert "Clear skies in Paris." in html


async def test_a_large_payload_starts_collapsed(console: ConsoleUnderTest) -> None:
    assert console.seeded.root is not None
    async with httpx.AsyncClient(base_url=console.base, timeout=30) as http:
        html = (
            await http.get("/run", params={"id": console.seeded.root.id}, headers=console.bearer())
        ).text
    big = html[html.index('data-position="4"') :]
    big = big[: big.index("</li>")]
    assert '<details class="payload"><summary>payload (' in big
    small = html[html.index('data-position="2"') :]
    assert '<pre class="payload">' in small[: small.index("</li>")]


async def test_the_session_page_shows_its_runs_as_a_tree(console: ConsoleUnderTest) -> None:
    seeded = console.seeded
    assert seeded.root is not None and seeded.child is not None and seeded.failed is not None
    async with httpx.AsyncClient(base_url=console.base, timeout=30) as http:
        html = (
            await http.get("/session", params={"id": seeded.session_id}, headers=console.bearer())
        ).text
    # The root is flagged: a run below it failed.
    root_item = html[html.index(f'<li class="failed-below"><a href="/run?id={seeded.root.id}"') :]
    nested = root_item[: root_item.index("</ul>")]
    assert "a run below failed" in nested
    assert f'href="/run?id={seeded.child.id}"' in nested
    assert f'href="/run?id={seeded.failed.id}"' in nested
    assert '<span class="kind">child</span>' in nested
    assert re.search(r'id="run-count">\s*7', html)  # the session's totals
    assert re.search(r"failed 1</a>", html)


async def test_a_session_pages_its_runs(
    console: ConsoleUnderTest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session page reads one ListRuns page of its runs (never the whole
    session), and pages forwards and back through them."""
    session_id = await console.store.session()
    runs = [await console.store.root(session_id, agent_id=f"a{n}") for n in range(7)]
    monkeypatch.setattr(views, "SESSION_RUNS_PAGE", 3)
    store = console.running.console.console.store  # type: ignore[union-attr]
    sizes: list[int] = []
    original = store.list_runs

    async def counting(query: Any, size: int, token: str, count_statuses: bool = False) -> Any:
        sizes.append(size)
        return await original(query, size, token, count_statuses)

    async def whole_session(*args: Any) -> Any:
        raise AssertionError("a session page read every run of its session")

    monkeypatch.setattr(store, "list_runs", counting)
    monkeypatch.setattr(store, "list_runs_by_session", whole_session)

    def shown(html: str) -> list[str]:
        tree = html[html.index("<h2>Runs") : html.index("<h2>Records")]
        return re.findall(r'<li><a href="/run\?id=([^"]+)"', tree)

    async with httpx.AsyncClient(
        base_url=console.base, timeout=30, headers=console.bearer()
    ) as http:
        html = (await http.get("/session", params={"id": session_id})).text
        pages = [shown(html)]
        while (following := _pager_link(html, "next")) is not None:
            html = (await http.get("/session", params=following)).text
            pages.append(shown(html))
        assert pages == [[r.id for r in runs[i : i + 3]] for i in (0, 3, 6)]
        back = _pager_link(html, "previous")
        assert back is not None
        html = (await http.get("/session", params=back)).text
        assert shown(html) == pages[1]
    assert sizes == [3] * 4
    assert re.search(r'id="run-count">\s*7', html)


async def test_a_session_of_10000_runs_opens_one_page_of_them(
    console: ConsoleUnderTest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The work per page is one ListRuns page of the session's runs and a
    count capped at 10,000, whatever the session holds."""
    session_id = await console.store.session()
    model = await console.store.root(session_id, agent_id="bulk")
    seed_session_runs(console.database, model, 10_000)
    store = console.running.console.console.store  # type: ignore[union-attr]
    pages: list[int] = []
    original = store.list_runs

    async def counting(query: Any, size: int, token: str, count_statuses: bool = False) -> Any:
        page = await original(query, size, token, count_statuses)
        pages.append(len(page.items))
        return page

    monkeypatch.setattr(store, "list_runs", counting)
    async with httpx.AsyncClient(
        base_url=console.base, timeout=60, headers=console.bearer()
    ) as http:
        started = time.perf_counter()
        html = (await http.get("/session", params={"id": session_id})).text
        took = time.perf_counter() - started
    print(f"a session of 10,001 runs: its page in {took * 1000:.0f} ms")
    assert pages == [views.SESSION_RUNS_PAGE]
    tree = html[html.index("<h2>Runs") : html.index("<h2>Records")]
    assert len(re.findall(r'<li><a href="/run\?id=', tree)) == views.SESSION_RUNS_PAGE
    assert re.search(r'id="run-count">\s*about 10,000\+', html)
    assert _pager_link(html, "next") is not None


async def test_a_failed_run_shows_its_failure_first(console: ConsoleUnderTest) -> None:
    seeded = console.seeded
    assert seeded.failed is not None and seeded.root is not None
    async with httpx.AsyncClient(
        base_url=console.base, timeout=30, headers=console.bearer()
    ) as http:
        failed = (await http.get("/run", params={"id": seeded.failed.id})).text
        root = (await http.get("/run", params={"id": seeded.root.id})).text
    box = failed[failed.index('id="failure"') : failed.index("</section>")]
    assert failed.index('id="failure"') < failed.index('<dl class="facts">')
    assert '<span class="failure-kind">timeout</span>' in box
    assert '<span class="failure-code">E42</span>' in box and "retryable" in box
    assert "tool &lt;b&gt;fetch&lt;/b&gt; timed out" in box and "<b>" not in failed
    ended = failed[failed.index('id="run-ended"') :]
    assert ended.index("<time datetime=") < ended.index("</dd>")
    assert re.search(r'id="run-duration">1\.\d s<', failed)
    # Its parent flags it among its children.
    assert "1 child run failed" in root
    children = root[root.index('id="children"') :]
    assert f'<span class="child child-failed"><a href="/run?id={seeded.failed.id}"' in children


async def test_records_by_type_and_jump_to_record_n(console: ConsoleUnderTest) -> None:
    run = await console.store.root(agent_id="jumper")
    seed_long_run(console.database, run, 200)  # with its start record: 201 records
    async with httpx.AsyncClient(
        base_url=console.base, timeout=30, headers=console.bearer()
    ) as http:
        jumped = (await http.get("/run", params={"id": run.id, "record": "37"})).text
        assert '<li class="record target" data-position="37"' in jumped
        assert 37 in _positions(jumped) and len(_positions(jumped)) == reads.RECORDS_PER_PAGE
        assert "data-live=" not in jumped  # not the tail
        first = (await http.get("/run", params={"id": run.id, "record": "1"})).text
        assert '<li class="record target" data-position="1"' in first
        older = re.search(r'class="older" href="([^"]+)"', jumped)
        assert older is not None and "type=" not in older[1]
        started = (
            await http.get("/run", params={"id": run.id, "record": "1", "type": "run_started"})
        ).text
        assert _positions(started) == [1]
        assert 'data-type="run_started"' in started and "data-live=" not in started
        # From record 120 on: the type's records there (the bulk ones), oldest first.
        bulk = (
            await http.get(
                "/run", params={"id": run.id, "type": "tool_result_received", "record": "120"}
            )
        ).text
        assert _positions(bulk) == list(range(120, 120 + reads.RECORDS_PER_PAGE))
        later = re.search(r'class="next" href="([^"]+)"', bulk)
        assert later is not None and "type=tool_result_received" in later[1]
        assert "after=169" in later[1]
        beyond = await http.get("/run", params={"id": run.id, "record": "999"})
        assert beyond.status_code == 400 and "record" in beyond.text


async def test_a_type_filter_covers_the_whole_run_in_bounded_screens(
    console: ConsoleUnderTest,
) -> None:
    """A rare type far apart in a long run: each screen reads at most
    ``TYPED_READS`` stretches, then links on; none is missed."""
    run = await console.store.root(agent_id="rare")
    seed_long_run(console.database, run, 200)
    marker = run.record("marker-1", type="marker")
    await console.store.runtime.AppendRunRecord(rs.AppendRunRecordRequest(record=marker))
    seed_long_run(console.database, run, 60_000)
    marker = run.record("marker-2", type="marker")
    await console.store.runtime.AppendRunRecord(rs.AppendRunRecordRequest(record=marker))
    examined = reads.TYPED_READS * paging.TYPED_SCAN
    async with httpx.AsyncClient(
        base_url=console.base, timeout=30, headers=console.bearer()
    ) as http:
        first = (await http.get("/run", params={"id": run.id, "type": "marker"})).text
        assert _positions(first) == [202]
        assert f"records 1–{examined} of 60203 examined" in first
        later = re.search(r'class="next" href="([^"]+)"', first)
        assert later is not None and f"after={examined}" in later[1]
        second = (await http.get(later[1].replace("&amp;", "&"))).text
        assert _positions(second) == [60203]
        assert 'class="next"' not in second and 'class="first"' in second


async def test_a_run_page_lists_its_children_exactly_and_counts_them_all(
    console: ConsoleUnderTest,
) -> None:
    """Children past the first screen, and runs of the session started between
    them, change nothing: the count, the failed ones and the link are exact."""
    root = await console.store.root(agent_id="fan-out")
    session_id = root.start.session_id
    base_ms = now_ms()
    children = []
    for i in range(reads.CHILDREN_SHOWN + 20):
        child = run_start(
            session_id=session_id, agent_id="worker", parent_run_id=root.id, started_ms=base_ms + i
        )
        await console.store.runtime.StartChildRun(child.child_request("fan-out", link_key=f"l{i}"))
        children.append(child)
        if i % 10 == 0:  # the session's other runs, between the children
            await console.store.root(session_id=session_id, agent_id="other")
    late = children[-1]
    await console.store.runtime.RecordRunTerminal(late.terminal_request(pb.RUN_STATUS_FAILED))
    async with httpx.AsyncClient(
        base_url=console.base, timeout=30, headers=console.bearer()
    ) as http:
        page = (await http.get("/run", params={"id": root.id})).text
        listed = page[page.index('id="children"') :]
        listed = listed[: listed.index("</dd>")]
        shown = re.findall(r'<a href="/run\?id=([^"]+)"', listed)
        assert shown == [child.id for child in children[: reads.CHILDREN_SHOWN]]
        assert f"Children ({len(children)})" in page
        assert "1 child run failed" in page  # the failed one is not among those shown
        every = re.search(r'id="more-children">[^<]*<a href="([^"]+)"', page)
        assert every is not None
        listing_page = (await http.get(every[1].replace("&amp;", "&"))).text
        in_list = re.findall(r'<tr class="run[^"]*"><td><a href="/run\?id=([^"]+)"', listing_page)
        assert in_list == [child.id for child in children[: views.LIST_PAGE_SIZE]]


async def test_a_payload_downloads_byte_for_byte(console: ConsoleUnderTest) -> None:
    root = console.seeded.root
    assert root is not None
    async with httpx.AsyncClient(base_url=console.base, timeout=30) as http:
        page = (await http.get("/run", params={"id": root.id}, headers=console.bearer())).text
        link = re.search(r'class="raw" href="(/run/payload\?id=[^"&]+&amp;record=(\d+))"', page)
        assert link is not None
        records = await console.store.records(root.id)
        script = next(r for r in records if r.payload == SCRIPT_PAYLOAD)
        url = f"/run/payload?id={root.id}&record={script.id}"
        response = await http.get(url, headers=console.bearer())
        assert response.status_code == 200 and response.content == SCRIPT_PAYLOAD
        assert response.headers["content-type"] == "application/octet-stream"
        assert response.headers["content-disposition"].startswith("attachment;")
        assert response.headers["content-security-policy"] == CSP
        assert (await http.get(url)).status_code == 401
        assert (await http.get(url, headers=console.bearer("worker"))).status_code == 403
        missing = await http.get(
            "/run/payload", params={"id": root.id, "record": "9999"}, headers=console.bearer()
        )
        assert missing.status_code == 404
        zero = await http.get(
            "/run/payload", params={"id": root.id, "record": "0"}, headers=console.bearer()
        )
        assert zero.status_code == 400


async def test_a_seeded_run_shows_its_seed(console: ConsoleUnderTest) -> None:
    upload = Upload(console.store.runtime, declaration())
    await upload.begin()
    await upload.history(b'[{"role":"user","parts":[{"text":"<script>seeded</script>"}]}]')
    await upload.append(part(unique("p"), str(upload.end), b'[{"role":"user"', final=False))
    await upload.append(part(unique("p"), str(upload.end), b"]", final=True))
    await upload.compiled(b"compiled start")
    await upload.publish()
    run = run_start(run_id=upload.run_id, seed_end_id=str(upload.seed_end))
    await console.store.runtime.StartSynchronousRun(
        sd.StartSynchronousRunRequest(run=run.start, started=started_record(run.start))
    )
    async with httpx.AsyncClient(
        base_url=console.base, timeout=30, headers=console.bearer()
    ) as http:
        html = (await http.get("/run", params={"id": run.id})).text
    shown = html[html.index('id="seed"') :]
    shown = shown[: shown.index("</dd>")]
    assert "literal seed, history through seed record" in shown
    assert len(re.findall(r'<li class="seed-record">', shown)) == 3  # not the compiled part
    assert "&lt;script&gt;seeded&lt;/script&gt;" in shown and "<script>seeded" not in html
    assert "literal part (final)" in shown


async def test_the_timeline_draws_the_run_its_records_and_its_children(
    console: ConsoleUnderTest,
) -> None:
    seeded = console.seeded
    assert seeded.root and seeded.child and seeded.failed
    async with httpx.AsyncClient(
        base_url=console.base, timeout=30, headers=console.bearer()
    ) as http:
        html = (await http.get("/run", params={"id": seeded.root.id, "view": "timeline"})).text
        records = (await http.get("/run", params={"id": seeded.root.id})).text
    chart = html[html.index('<svg class="timeline-chart"') : html.index("</svg>")]
    bars = re.findall(r'<rect class="bar bar-(\w+) bar-status-(\w+)[^"]*" x="([\d.]+)"', chart)
    assert [(role, status) for role, status, _ in bars] == [
        ("run", "running"),
        ("child", "running"),
        ("child", "failed"),
    ]
    assert all(0 <= float(x) <= 1000 for _, _, x in bars)
    ticks = re.findall(r'<rect class="tick[^"]*" x="([\d.]+)"', chart)
    assert len(ticks) == len(_positions(records))  # one per record of the page
    assert "(failed)" in chart and f'href="/run?id={seeded.failed.id}&amp;view=timeline"' in chart


async def test_the_memory_and_context_stores_are_visible_a_page_at_a_time(
    console: ConsoleUnderTest, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent, run_id, key = unique("agent"), unique("memory-run"), unique("context")
    events = [
        ms.MemoryEvent(
            type="user_message",
            timestamp=ts(now_ms()),
            data=json.dumps({"message": f"<b>note {n}</b>"}).encode(),
        )
        for n in range(5)
    ]
    await console.store.memory.AppendEvents(
        ms.AppendEventsRequest(agent_id=agent, run_id=run_id, events=events)
    )
    for expected, prompt in enumerate(("first <i>prompt</i>", "second prompt")):
        await console.store.context.SaveContext(
            ctx.SaveContextRequest(
                key=key,
                snapshot=ctx.ContextSnapshot(system_prompt=prompt),
                expected_version=expected,
            )
        )
    monkeypatch.setattr(stores, "MEMORY_PAGE", 2)
    async with httpx.AsyncClient(
        base_url=console.base, timeout=30, headers=console.bearer()
    ) as http:
        first = (await http.get("/memory", params={"agent": agent, "run": run_id})).text
        assert "5 events stored" in first
        assert _positions(first) == [1, 2] and "&lt;b&gt;note 0&lt;/b&gt;" in first
        following = _pager_link(first, "next")
        assert following is not None
        second = (await http.get("/memory", params=following)).text
        assert _positions(second) == [3, 4]
        back = _pager_link(second, "previous")
        assert back is not None
        assert _positions((await http.get("/memory", params=back)).text) == [1, 2]
        none = (await http.get("/memory", params={"agent": agent, "run": "nothing"})).text
        assert "0 events stored" in none

        current = (await http.get("/context", params={"key": key})).text
        assert "2 of 2" in current and "second prompt" in current
        older = (await http.get("/context", params={"key": key, "version": "1"})).text
        assert "1 of 2" in older and "first &lt;i&gt;prompt&lt;/i&gt;" in older
        assert "<i>prompt" not in older
        missing = (await http.get("/context", params={"key": unique("absent")})).text
        assert 'id="context-missing"' in missing
        assert (await http.get("/memory")).status_code == 200  # the form
        refused = await http.get("/context", params={"key": key}, headers=console.bearer("worker"))
        assert refused.status_code == 403 and "prompt" not in refused.text


# --- Listings ----------------------------------------------------------------------------


def _links(html: str, path: str) -> list[str]:
    return re.findall(rf'<a href="{path}\?id=([^"&]+)">', html)


def _pager_link(html: str, name: str) -> dict[str, list[str]] | None:
    found = re.search(rf'class="{name}" href="[^"?]*\?([^"]*)"', html)
    if found is None:
        return None
    return parse_qs(found[1].replace("&amp;", "&"))


async def test_sessions_are_newest_first_filtered_counted_and_paged_both_ways(
    console: ConsoleUnderTest, monkeypatch: pytest.MonkeyPatch
) -> None:
    prefix = unique("find")
    ids = [await console.store.session(f"{prefix}-{n}") for n in range(5)]
    await console.store.end(ids[1])
    monkeypatch.setattr(views, "LIST_PAGE_SIZE", 2)
    async with httpx.AsyncClient(
        base_url=console.base, timeout=30, headers=console.bearer()
    ) as http:
        first = (await http.get("/sessions", params={"id": prefix})).text
        assert _links(first, "/session") == [ids[4], ids[3]]  # newest first
        assert re.search(r"active <span class=\"count\">4</span>", first)
        assert re.search(r"ended <span class=\"count\">1</span>", first)
        # Forwards to the end, then back to the first page, by the pager alone.
        walked, html, history = [], first, [first]
        while (following := _pager_link(html, "next")) is not None:
            html = (await http.get("/sessions", params=following)).text
            history.append(html)
            walked += _links(html, "/session")
        assert _links(first, "/session") + walked == ids[::-1]
        while (back := _pager_link(html, "previous")) is not None:
            html = (await http.get("/sessions", params=back)).text
            history.pop()
            assert _links(html, "/session") == _links(history[-1], "/session")
        assert _links(html, "/session") == [ids[4], ids[3]]
        oldest = (await http.get("/sessions", params={"id": prefix, "order": "oldest"})).text
        assert _links(oldest, "/session") == [ids[0], ids[1]]
        exact = (await http.get("/sessions", params={"id": ids[2], "match": "exact"})).text
        assert _links(exact, "/session") == [ids[2]]
        ended = (await http.get("/sessions", params={"id": prefix, "status": "ended"})).text
        assert _links(ended, "/session") == [ids[1]]
        recent = (await http.get("/sessions", params={"id": prefix, "range": "15m"})).text
        assert _links(recent, "/session") == [ids[4], ids[3]]
        assert "at=" in recent  # the relative range is anchored for the next pages
        later = (await http.get("/sessions", params={"from": "2999-01-01T00:00"})).text
        assert "no sessions" in later
        bad = await http.get("/sessions", params={"from": "yesterday", "range": "custom"})
        assert bad.status_code == 400 and "from" in bad.text


async def test_the_listings_ask_the_store_to_filter_and_count(
    console: ConsoleUnderTest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The filters are ListRuns' and ListSessions', read once per page with
    the counts: the console never reads a page to filter it."""
    store = console.running.console.console.store  # type: ignore[union-attr]
    asked: list[tuple[Any, int, str, bool]] = []
    for name in ("list_runs", "list_sessions"):
        original = getattr(store, name)

        def spy(original: Any = original) -> Any:
            async def listed(
                query: Any, size: int, token: str, count_statuses: bool = False
            ) -> Any:
                asked.append((query, size, token, count_statuses))
                return await original(query, size, token, count_statuses)

            return listed

        monkeypatch.setattr(store, name, spy())
    async with httpx.AsyncClient(
        base_url=console.base, timeout=30, headers=console.bearer()
    ) as http:
        page = await http.get(
            "/runs",
            params={
                "id": "run-",
                "agent": "fetch",
                "label": "tier=gold, zone = eu",
                "status": "failed",
                "range": "24h",
                "root": "1",
            },
        )
        assert page.status_code == 200
        ((query, size, token, counted),) = asked
        assert (size, token, counted) == (views.LIST_PAGE_SIZE, "", True)
        assert query.run_id_prefix == "run-" and query.agent_id_prefix == "fetch"
        assert dict(query.labels) == {"tier": "gold", "zone": "eu"}
        assert query.statuses == frozenset({RunStatus.FAILED}) and query.root_only
        assert query.newest_first and query.started_after is not None
        assert time.time_ns() - query.started_after < 24 * 3600 * 10**9 + 60 * 10**9
        asked.clear()
        await http.get("/sessions", params={"id": "abc", "match": "exact", "order": "oldest"})
        ((query, size, token, counted),) = asked
        assert query.session_id == "abc" and not query.session_id_prefix
        assert not query.newest_first and counted


async def test_runs_show_failure_end_duration_and_every_filter(
    console: ConsoleUnderTest,
) -> None:
    seeded = console.seeded
    assert seeded.one_shot and seeded.suspended and seeded.root and seeded.failed
    assert seeded.child
    async with httpx.AsyncClient(
        base_url=console.base, timeout=30, headers=console.bearer()
    ) as http:

        async def listed(**params: str) -> str:
            response = await http.get("/runs", params=params)
            assert response.status_code == 200, response.text
            return response.text

        by_agent = await listed(agent="wait")  # a prefix of "waiter"
        assert seeded.suspended.id in by_agent and seeded.root.id not in by_agent
        suspended = await listed(status="suspended")
        assert seeded.suspended.id in suspended and seeded.root.id not in suspended
        sessionless = await listed(sessionless="1")
        assert seeded.one_shot.id in sessionless and seeded.root.id not in sessionless
        assert "<td>one-shot</td>" in sessionless
        assert seeded.root.id in await listed(root="1", agent="planner")
        assert seeded.child.id in await listed(agent="searcher")
        assert seeded.child.id not in await listed(root="1", agent="searcher")
        gold = await listed(label="tier=gold")
        assert _links(gold, "/run") == [seeded.failed.id]
        assert _links(await listed(label="tier=silver"), "/run") == []
        exact = await listed(id=seeded.failed.id, match="exact")
        assert _links(exact, "/run") == [seeded.failed.id]
        prefix = await listed(id=seeded.failed.id[:-2])
        assert seeded.failed.id in _links(prefix, "/run")
        # The failed run: its failure in the row (escaped), its end and duration.
        row = gold[gold.index('<tr class="run') : gold.index("</tr>", gold.index('<tr class="run'))]
        assert '<span class="failure-kind">timeout</span>' in row
        assert '<span class="failure-code">E42</span>' in row and "retryable" in row
        assert "tool &lt;b&gt;fetch&lt;/b&gt; timed out" in row and "<b>fetch" not in row
        assert len(re.findall(r"<time datetime=", row)) == 2  # started and ended
        assert re.search(r"<td>1\.\d s</td>", row)  # ended 1.5 s after its start
        # Totals per status, whatever the status filter, and "about" at the cap.
        failed = await listed(status="failed")
        assert re.search(
            r'status-failed current" href="[^"]*">failed <span class="count">\d', failed
        )
        assert re.search(r"running <span class=\"count\">(about )?\d", failed)
        assert seeded.root.id in await listed(range="1h", agent="planner")
        future = await listed(range="custom", **{"from": "2999-01-01T00:00"})
        assert "no runs" in future
        bad = await http.get("/runs", params={"label": "tier"})
        assert bad.status_code == 400 and "key=value" in bad.text


async def test_a_count_at_the_cap_says_about(
    console: ConsoleUnderTest, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(listing, "COUNT_CAP", 1)
    async with httpx.AsyncClient(
        base_url=console.base, timeout=30, headers=console.bearer()
    ) as http:
        html = (await http.get("/runs")).text
    assert re.search(r"running <span class=\"count\">about 1\+</span>", html)


# --- Paging from the tail ----------------------------------------------------------------


def _positions(html: str) -> list[int]:
    return [int(p) for p in re.findall(r'<li class="record[^"]*" data-position="(\d+)"', html)]


async def test_records_open_at_the_tail_and_page_back(console: ConsoleUnderTest) -> None:
    run = await console.store.root(agent_id="pager")
    seed_long_run(console.database, run, 120)  # with its start record: 121 records
    seen: list[int] = []
    async with httpx.AsyncClient(
        base_url=console.base, timeout=30, headers=console.bearer()
    ) as http:
        html = (await http.get("/run", params={"id": run.id})).text
        assert "data-live=" in html  # the tail follows new records
        while True:
            page = _positions(html)
            assert page == sorted(page, reverse=True)
            seen += page
            older = re.search(r'class="older" href="/run\?id=[^"]*before=(\d+)"', html)
            if older is None:
                break
            html = (await http.get("/run", params={"id": run.id, "before": older[1]})).text
            assert "data-live=" not in html
    assert seen == list(range(121, 0, -1))
    assert _positions(html)[-1] == 1


async def test_a_page_reads_at_most_one_page_of_records(
    console: ConsoleUnderTest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """However long the run, a request reads one page of records: the tail's
    position comes from the store, not from reading records."""
    run = await console.store.root(agent_id="long")
    seed_long_run(console.database, run, 100_000)
    store = console.running.console.console.store  # type: ignore[union-attr]
    counted: list[int] = []
    original = store.list_run_records

    async def counting(run_id: str, cursor: str, limit: int) -> Any:
        page = await original(run_id, cursor, limit)
        counted.append(len(page.events))
        return page

    monkeypatch.setattr(store, "list_run_records", counting)
    async with httpx.AsyncClient(
        base_url=console.base, timeout=30, headers=console.bearer()
    ) as http:
        html = (await http.get("/run", params={"id": run.id})).text
    assert _positions(html)[0] == 100_001
    assert len(_positions(html)) == reads.RECORDS_PER_PAGE
    # One page, and the run's first record (its start names a predecessor).
    assert sorted(counted) == [1, reads.RECORDS_PER_PAGE]


# --- Sign-in -----------------------------------------------------------------------------


async def test_sign_in_sets_a_strict_http_only_cookie_and_never_shows_the_token(
    console: ConsoleUnderTest, caplog: pytest.LogCaptureFixture
) -> None:
    token = console.tokens["reader"]
    origin = {"origin": console.base}
    caplog.set_level(logging.DEBUG)
    async with httpx.AsyncClient(base_url=console.base, timeout=30) as http:
        form = await http.get("/login")
        assert 'name="token"' in form.text and 'method="post"' in form.text
        wrong = await http.post("/login", data={"token": "nope"}, headers=origin)
        assert wrong.status_code == 401 and "set-cookie" not in wrong.headers
        signed = await http.post("/login", data={"token": token, "next": "/runs"}, headers=origin)
        assert signed.status_code == 303 and signed.headers["location"] == "/runs"
        cookie = signed.headers["set-cookie"]
        assert cookie.startswith("runstore_console=")
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
        assert "Secure" not in cookie  # plain HTTP here; the TLS test checks Secure
        value = cookie.split(";")[0].split("=", 1)[1]
        assert token not in cookie and value != token
        page = await http.get("/sessions", headers={"cookie": f"runstore_console={value}"})
        assert page.status_code == 200 and "reader (reader)" in page.text
        assert token not in page.text
        out = await http.post("/logout", headers={"cookie": f"runstore_console={value}", **origin})
        assert out.status_code == 303
        after = await http.get("/sessions", headers={"cookie": f"runstore_console={value}"})
        assert after.status_code == 401
    assert all(token not in record.getMessage() for record in caplog.records)


async def test_sign_in_from_another_origin_is_refused(console: ConsoleUnderTest) -> None:
    token = console.tokens["reader"]
    async with httpx.AsyncClient(base_url=console.base, timeout=30) as http:
        for headers in ({}, {"origin": "http://evil.example"}, {"referer": "http://evil/x"}):
            response = await http.post("/login", data={"token": token}, headers=headers)
            assert response.status_code == 403 and "set-cookie" not in response.headers
        via_referer = await http.post(
            "/login", data={"token": token}, headers={"referer": f"{console.base}/login"}
        )
        assert via_referer.status_code == 303


async def test_sign_in_only_redirects_within_the_console(console: ConsoleUnderTest) -> None:
    async with httpx.AsyncClient(base_url=console.base, timeout=30) as http:
        for target in ("https://evil.example/", "//evil.example/", "/\\evil"):
            response = await http.post(
                "/login",
                data={"token": console.tokens["reader"], "next": target},
                headers={"origin": console.base},
            )
            assert response.headers["location"] == "/sessions"


async def test_a_removed_principal_is_signed_out(tmp_path: Path) -> None:
    async with (
        console_server(tmp_path) as under,
        httpx.AsyncClient(base_url=under.base, timeout=30) as http,
    ):
        signed = await http.post(
            "/login", data={"token": under.tokens["reader"]}, headers={"origin": under.base}
        )
        cookie = {"cookie": f"runstore_console={signed.cookies['runstore_console']}"}
        http.cookies.clear()
        assert (await http.get("/sessions", headers=cookie)).status_code == 200
        write_auth_file(tmp_path / "auth.toml", {})
        under.running.security.reload()
        assert (await http.get("/sessions", headers=cookie)).status_code == 401


async def test_with_authentication_off_the_console_is_open(tmp_path: Path) -> None:
    async with console_server(tmp_path, auth=False) as under:
        session_id = await under.store.session()
        async with httpx.AsyncClient(base_url=under.base, timeout=30) as http:
            response = await http.get("/sessions")
        assert response.status_code == 200 and session_id in response.text
        assert "authentication off" in response.text
        async with httpx.AsyncClient(base_url=under.base, timeout=30) as http:
            localhost = await http.get("/sessions", headers={"host": "localhost"})
            rebound = await http.get("/sessions", headers={"host": "evil.example:8080"})
        assert localhost.status_code == 200
        assert rebound.status_code == 400 and session_id not in rebound.text
        assert rebound.headers["content-security-policy"] == CSP


async def test_over_tls_the_console_uses_the_server_certificate(tmp_path: Path) -> None:
    async with console_server(tmp_path, tls=Authority()) as under:
        async with httpx.AsyncClient(
            base_url=under.base,
            timeout=30,
            verify=ssl.create_default_context(cafile=str(tmp_path / "ca.crt")),
        ) as http:
            assert (await http.get("/healthz")).text == "ok"
            signed = await http.post(
                "/login", data={"token": under.tokens["reader"]}, headers={"origin": under.base}
            )
        assert signed.status_code == 303
        assert "Secure" in signed.headers["set-cookie"]


async def test_sighup_reloads_the_console_certificate(tmp_path: Path) -> None:
    async with console_server(tmp_path, tls=Authority()) as under:
        assert under.running.console is not None
        fresh = Authority("another CA")
        fresh.server().write(tmp_path, "server")  # over the files the server was started with
        trusting_fresh = ssl.create_default_context(cadata=fresh.pem.decode())
        async with httpx.AsyncClient(
            base_url=under.base, timeout=30, verify=trusting_fresh
        ) as http:
            with pytest.raises(httpx.ConnectError):
                await http.get("/healthz")
            assert under.running.console.reload_tls()
            assert (await http.get("/healthz")).text == "ok"


# --- Live --------------------------------------------------------------------------------


async def _next_event(lines: AsyncIterator[str]) -> dict[str, str]:
    """The next ``record`` event's fields (pings and other events skipped)."""
    event: dict[str, str] = {}
    async for line in lines:
        if not line:
            if event.get("event") == "record":
                return event
            event = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            event[name] = value.lstrip()
    raise AssertionError("the stream ended")


async def test_a_run_stream_sends_new_records_and_resumes_after_a_reconnect(
    console: ConsoleUnderTest,
) -> None:
    run = await console.store.root(agent_id="live")
    async with httpx.AsyncClient(base_url=console.base, timeout=30) as http:
        async with http.stream(
            "GET", "/run/events", params={"id": run.id, "after": "1"}, headers=console.bearer()
        ) as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            assert stream.headers["content-security-policy"] == CSP
            lines = stream.aiter_lines()
            await console.store.runtime.AppendRunRecord(
                rs.AppendRunRecordRequest(record=run.record("live-1", payload=b'{"n":1}'))
            )
            first = await asyncio.wait_for(_next_event(lines), 20)
        assert first["id"] == "2" and json.loads(first["data"])["event_key"] == "live-1"
        for n in (2, 3):
            await console.store.runtime.AppendRunRecord(
                rs.AppendRunRecordRequest(record=run.record(f"live-{n}", payload=b"{}"))
            )
        async with http.stream(
            "GET",
            "/run/events",
            params={"id": run.id, "after": "1"},
            headers={**console.bearer(), "last-event-id": "3"},
        ) as stream:
            resumed = await asyncio.wait_for(_next_event(stream.aiter_lines()), 20)
    assert resumed["id"] == "4" and json.loads(resumed["data"])["event_key"] == "live-3"


async def test_a_session_stream_counts_session_positions(console: ConsoleUnderTest) -> None:
    run = await console.store.root(agent_id="live-session")
    session_id = run.start.session_id
    async with (
        httpx.AsyncClient(base_url=console.base, timeout=30) as http,
        http.stream(
            "GET",
            "/session/events",
            params={"id": session_id, "after": "0"},
            headers=console.bearer(),
        ) as stream,
    ):
        lines = stream.aiter_lines()
        started = await asyncio.wait_for(_next_event(lines), 20)
        await console.store.runtime.AppendRunRecord(
            rs.AppendRunRecordRequest(record=run.record("s-1", payload=b'"<b>x</b>"'))
        )
        appended = await asyncio.wait_for(_next_event(lines), 20)
    assert started["id"] == "1" and appended["id"] == "2"
    assert json.loads(appended["data"])["payload"]["text"] == '"<b>x</b>"'


async def test_shutdown_ends_open_streams(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Shutdown ends an open live stream at once, without an ``end`` event (that
    would stop the page; without it the browser reconnects to whichever server
    answers), and the console exits: its task done, its port closed, and no
    request left for its grace period to cut off."""
    async with console_server(tmp_path) as under:
        console = under.running.console
        assert console is not None
        run = await under.store.root(agent_id="stopping")
        async with (
            httpx.AsyncClient(base_url=under.base, timeout=30) as http,
            http.stream(
                "GET", "/run/events", params={"id": run.id, "after": "0"}, headers=under.bearer()
            ) as stream,
        ):
            lines = stream.aiter_lines()
            first = await asyncio.wait_for(_next_event(lines), 20)
            assert first["id"] == "1"  # the stream is open and live
            reader = asyncio.ensure_future(_drain(lines))
            with caplog.at_level(logging.INFO, logger="uvicorn.error"):
                await asyncio.wait_for(shutdown(under.running, 1), 20)
            rest = await asyncio.wait_for(reader, 20)
        under.running.console = None  # stopped already
        assert console.console.shutdown is not None and console.console.shutdown.is_set()
        events = [line.partition(":")[2].strip() for line in rest if line.startswith("event:")]
        assert events == [], rest  # neither "end" nor "failure"
        assert console.task.done() and console.sock.fileno() == -1
        with pytest.raises(httpx.ConnectError):
            async with httpx.AsyncClient(base_url=under.base, timeout=5) as http:
                await http.get("/healthz")
        cut_off = [r.getMessage() for r in caplog.records if "graceful shutdown" in r.getMessage()]
        assert cut_off == []


async def _drain(lines: AsyncIterator[str]) -> list[str]:
    """Every line up to the stream's end (a cut connection ends it too)."""
    seen: list[str] = []
    try:
        async for line in lines:
            seen.append(line)
    except httpx.RemoteProtocolError:
        pass
    return seen


# --- Start-up ----------------------------------------------------------------------------


def test_a_console_off_loopback_needs_tls_and_an_auth_file() -> None:
    from runstore.server.auth import Security

    config = ServerConfig(console_listen="0.0.0.0:8080")
    with pytest.raises(SecurityError, match=r"console on 0\.0\.0\.0:8080.*--tls-cert"):
        check_exposure(config, Security())
    check_exposure(ServerConfig(console_listen="0.0.0.0:8080", insecure=True), Security())
    check_exposure(ServerConfig(console_listen="127.0.0.1:8080"), Security())


async def test_a_busy_console_port_is_a_listen_error(tmp_path: Path) -> None:
    async with console_server(tmp_path) as under:
        assert under.running.console is not None
        config = ServerConfig(
            listen="127.0.0.1:0",
            console_listen=f"127.0.0.1:{under.running.console.port}",
            database_url=f"sqlite:///{tmp_path / 'other.db'}",
            migrate=True,
        )
        async with open_database(config) as db:
            with pytest.raises(
                ListenError, match=r"cannot listen on .* \(--console-listen\): .*in use"
            ):
                await build_server(config, create_stores(config, db))


def test_the_console_is_off_by_default_and_takes_host_and_port() -> None:
    from runstore.server import config

    def load(*flags: str) -> ServerConfig:
        import argparse

        parser = argparse.ArgumentParser()
        config.add_arguments(parser)
        return config.load(parser.parse_args(list(flags)), env={})

    assert load().console_listen == ""
    assert load("--console-listen", "127.0.0.1:8080").console_listen == "127.0.0.1:8080"
    with pytest.raises(config.ConfigError, match="--console-listen"):
        load("--console-listen", "unix:/tmp/console.sock")

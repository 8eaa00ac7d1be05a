"""The console in several namespaces: each page shows one, chosen by its URL
(else the principal's own), links and live streams keep it, nothing of another
namespace shows or can be told apart from absent, and deleting a namespace
ends its live pages (docs/namespaces.md#the-console)."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import pytest

from runstore.v1 import namespace_admin_pb2 as na
from runstore.v1 import runtime_store_pb2 as rs
from tests.console.support import ConsoleUnderTest, console_server
from tests.secured import Entry, channel_with_token
from tests.support import Run, Store

SHARED_SESSION = "console-shared-session"
SHARED_RUN = "console-shared-run"
"""One session ID and one run ID, created in each namespace: independent objects
told apart by their agent (``agent-of-NAMESPACE``)."""

PRINCIPALS = {
    "operator": Entry("admin", namespaces=["*"]),
    "reader-a": Entry("reader", namespaces=["team-a"]),
    "reader-ab": Entry("reader", namespaces=["team-a", "team-b"]),
    "reader-gone": Entry("reader", namespaces=["team-gone"]),
}


@dataclass
class Teams:
    under: ConsoleUnderTest
    stores: dict[str, Store]
    """Namespace → stubs whose calls act in it (as the operator)."""
    runs: dict[str, Run]
    """Namespace → its SHARED_RUN, the root run of its SHARED_SESSION."""
    only_in_b: Run
    """A run that exists in team-b only."""

    def bearer(self, name: str) -> dict[str, str]:
        return self.under.bearer(name)


@pytest.fixture(scope="module")
async def teams(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Teams]:
    async with console_server(tmp_path_factory.mktemp("console-ns"), extra=PRINCIPALS) as under:
        operator = under.tokens["operator"]
        admin = Store(channel_with_token(under.store.target, operator))
        for name in ("team-a", "team-b", "team-c", "team-gone"):
            await admin.namespaces.CreateNamespace(
                na.CreateNamespaceRequest(namespace=na.Namespace(name=name))
            )
        stores = {
            name: Store(channel_with_token(under.store.target, operator, name))
            for name in ("default", "team-a", "team-b", "team-gone")
        }
        runs = {}
        for name, store in stores.items():
            await store.session(SHARED_SESSION)
            runs[name] = await store.root(
                SHARED_SESSION, agent_id=f"agent-of-{name}", run_id=SHARED_RUN
            )
        only_in_b = await stores["team-b"].one_shot(agent_id="only-in-b")
        try:
            yield Teams(under, stores, runs, only_in_b)
        finally:
            for store in (admin, *stores.values()):
                await store.channel.close()


async def _get(teams: Teams, who: str, path: str, **params: str) -> httpx.Response:
    async with httpx.AsyncClient(base_url=teams.under.base, timeout=30) as http:
        return await http.get(path, params=params, headers=teams.bearer(who))


def _options(html: str) -> list[str]:
    """The namespaces the header's picker offers."""
    picker = re.search(r'<form[^>]*id="namespace-picker".*?</form>', html, re.S)
    assert picker is not None, "no namespace picker on the page"
    return re.findall(r'<option value="([^"]*)"', picker.group(0))


async def test_a_page_shows_only_the_namespace_it_names(teams: Teams) -> None:
    """The same session and run IDs in every namespace: each page shows its
    own namespace's session and run, never another's."""
    for namespace, other in (("team-a", "team-b"), ("team-b", "team-a")):
        for path, params in (
            ("/session", {"id": SHARED_SESSION}),
            ("/runs", {}),
            ("/run", {"id": SHARED_RUN}),
        ):
            page = await _get(teams, "reader-ab", path, namespace=namespace, **params)
            assert page.status_code == 200, (namespace, path)
            assert f"agent-of-{namespace}" in page.text, (namespace, path)
            assert f"agent-of-{other}" not in page.text, (namespace, path)
            assert "agent-of-default" not in page.text, (namespace, path)
        listing = await _get(teams, "reader-ab", "/sessions", namespace=namespace)
        assert SHARED_SESSION in listing.text
    runs_of_a = await _get(teams, "reader-ab", "/runs", namespace="team-a")
    assert teams.only_in_b.id not in runs_of_a.text


async def test_an_id_of_another_namespace_answers_as_an_absent_one(teams: Teams) -> None:
    """team-b's run, looked up from team-a, gets the very page a run ID that
    exists nowhere gets (its ID aside)."""
    only_b = teams.only_in_b.id
    absent = "r" * len(only_b)
    for path in ("/run", "/run/events"):
        params = {"id": only_b, "after": "0"}
        found = await _get(teams, "reader-ab", path, namespace="team-a", **params)
        nowhere = await _get(
            teams, "reader-ab", path, namespace="team-a", **{**params, "id": absent}
        )
        assert found.status_code == nowhere.status_code == 404, path
        assert found.text.replace(only_b, absent) == nowhere.text
    in_b = await _get(teams, "reader-ab", "/run", namespace="team-b", id=only_b)
    assert in_b.status_code == 200


async def test_links_forms_and_live_streams_stay_in_the_namespace(teams: Teams) -> None:
    session = await _get(teams, "reader-ab", "/session", id=SHARED_SESSION, namespace="team-b")
    links = re.findall(r'(?:href|data-live)="(/(?:session|run|runs|sessions)[^"]*)"', session.text)
    assert links, "the session page links to nothing"
    assert all("namespace=team-b" in link for link in links), links
    assert 'data-namespace="team-b"' in session.text  # console.js keeps it in live rows
    listing = await _get(teams, "reader-ab", "/runs", namespace="team-b")
    assert '<input type="hidden" name="namespace" value="team-b">' in listing.text


async def test_the_picker_offers_the_namespaces_the_principal_is_bound_to(teams: Teams) -> None:
    page = await _get(teams, "reader-ab", "/sessions", namespace="team-a")
    assert _options(page.text) == ["team-a", "team-b"]
    page = await _get(teams, "operator", "/sessions")
    assert _options(page.text)[:4] == ["default", "team-a", "team-b", "team-c"]


async def test_without_a_namespace_a_page_shows_the_principals_own(teams: Teams) -> None:
    """default when the principal may view it, else the first namespace it is bound to."""
    expected = {
        "reader": "default",
        "reader-a": "team-a",
        "reader-ab": "team-a",
        "operator": "default",
    }
    for who, namespace in expected.items():
        page = await _get(teams, who, "/session", id=SHARED_SESSION)
        assert page.status_code == 200, who
        assert f"agent-of-{namespace}" in page.text, who
        assert f'<option value="{namespace}" selected>' in page.text, who


async def test_a_namespace_the_principal_is_not_bound_to_is_refused_before_it_exists(
    teams: Teams,
) -> None:
    """403 whether team-b exists or not (its existence is not told), then an
    unknown namespace is 404, and a malformed name 400."""
    for namespace in ("team-b", "no-such-team"):
        page = await _get(teams, "reader-a", "/session", id=SHARED_SESSION, namespace=namespace)
        assert page.status_code == 403, namespace
        assert "agent-of-" not in page.text
    refusals = [
        (await _get(teams, "reader-a", "/sessions", namespace=namespace)).text
        for namespace in ("team-b", "no-such-team")
    ]
    assert refusals[0].replace("team-b", "no-such-team") == refusals[1]
    unknown = await _get(teams, "operator", "/sessions", namespace="no-such-team")
    assert unknown.status_code == 404 and "no-such-team" in unknown.text
    malformed = await _get(teams, "operator", "/sessions", namespace="Team_B")
    assert malformed.status_code == 400


async def _events(lines: AsyncIterator[str]) -> AsyncIterator[dict[str, str]]:
    """The stream's events (pings skipped)."""
    event: dict[str, str] = {}
    async for line in lines:
        if not line:
            if event:
                yield event
            event = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            event[name] = value.lstrip()


async def test_a_live_stream_sees_its_namespace_only_and_ends_when_it_is_deleted(
    teams: Teams,
) -> None:
    """A record appended first to the same run ID in team-a is not sent to a
    team-gone page; team-gone's own is; deleting team-gone ends the page with
    a failure event at once, and its pages are then 404 like an unknown one."""
    gone, same_id_elsewhere = teams.runs["team-gone"], teams.runs["team-a"]
    assert gone.id == same_id_elsewhere.id
    async with (
        httpx.AsyncClient(base_url=teams.under.base, timeout=30) as http,
        http.stream(
            "GET",
            "/run/events",
            params={"id": gone.id, "after": "1", "namespace": "team-gone"},
            headers=teams.bearer("reader-gone"),
        ) as stream,
    ):
        assert stream.status_code == 200
        events = _events(stream.aiter_lines())
        await teams.stores["team-a"].runtime.AppendRunRecord(
            rs.AppendRunRecordRequest(record=same_id_elsewhere.record("elsewhere", payload=b"{}"))
        )
        await teams.stores["team-gone"].runtime.AppendRunRecord(
            rs.AppendRunRecordRequest(record=gone.record("own", payload=b"{}"))
        )
        first = await asyncio.wait_for(anext(events), 20)
        assert first["event"] == "record" and json.loads(first["data"])["event_key"] == "own"
        operator = Store(
            channel_with_token(teams.under.store.target, teams.under.tokens["operator"])
        )
        try:
            await operator.namespaces.DeleteNamespace(na.DeleteNamespaceRequest(name="team-gone"))
        finally:
            await operator.channel.close()
        ended = await asyncio.wait_for(anext(events), 20)
        assert ended["event"] == "failure"
        assert "was deleted" in json.loads(ended["data"])["error"]
    after = await _get(teams, "operator", "/sessions", namespace="team-gone")
    never = await _get(teams, "operator", "/sessions", namespace="never-was")
    assert after.status_code == never.status_code == 404
    assert after.text.replace("team-gone", "never-was") == never.text


async def test_a_refusal_keeps_the_picker_and_offers_no_sign_in_to_a_signed_in_principal(
    teams: Teams,
) -> None:
    refused = await _get(teams, "reader-ab", "/sessions", namespace="team-c")
    assert refused.status_code == 403
    picker = refused.text[refused.text.index('id="namespace-picker"') :]
    picker = picker[: picker.index("</form>")]
    assert re.findall(r'<option value="([^"]+)"', picker) == ["team-a", "team-b"]
    assert 'href="/login"' not in refused.text and "Sign in" not in refused.text
    assert "Signed in as reader-ab (reader)" in refused.text
    # A principal whose role may not read the console gets no picker, and no sign-in.
    worker = await _get(teams, "worker", "/sessions")
    assert worker.status_code == 403
    assert 'id="namespace-picker"' not in worker.text and 'href="/login"' not in worker.text
    # Without a principal, signing in is what is offered.
    async with httpx.AsyncClient(base_url=teams.under.base, timeout=30) as http:
        anonymous = await http.get("/sessions")
    assert anonymous.status_code == 401 and 'href="/login"' in anonymous.text

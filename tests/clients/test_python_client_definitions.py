"""The Python client and definitions with provenance (#36), against a real
studio (Daphne on this run's PostgreSQL and Redis): the agent's revision
and ETag once `ready`, and `if_match` — a definition only over the
revision game code last saw, refused with `definition_changed` when anyone
defined the agent since; the asyncio twin."""

import asyncio

import httpx
import pytest
from django.conf import settings
from studio_client import StudioError, connect, connect_async

from .test_python_client import Studio, bearer

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not settings.REDIS_URL, reason="the servers it starts take this run's Redis"),
]

DM = {"systemPrompt": "You are the dungeon master.", "memory": {}}


@pytest.fixture(scope="module")
def web(django_db_setup, tmp_path_factory):
    from tests.support.web import stop_web

    studio = Studio(tmp_path_factory.mktemp("web"))
    yield studio
    stop_web(studio.processes)


@pytest.fixture
def io(web, designer_key):
    with connect(web.url, designer_key) as io:
        yield io


def elsewhere(web, key, name, prompt):
    """A definition made by other code (a designer, another server)."""
    answer = httpx.put(
        f"{web.url}/api/v1/agents/{name}", json={**DM, "systemPrompt": prompt}, headers=bearer(key)
    )
    assert answer.status_code in (200, 201), answer.text


def test_after_ready_the_agent_has_its_revision_and_etag(io, designer_key):
    dm = io.Agent("dm", DM)
    info = dm.ready

    assert (dm.revision, dm.etag) == (1, '"1"')
    assert info["revision"]["via"] == "api" and info["revision"]["by"]["type"] == "apiKey"
    assert designer_key.split("_", 2)[2] not in str(info)
    assert io.Agent("dm", {**DM, "systemPrompt": "You are the ferryman."}).ready["revision"]["number"] == 2


def test_if_match_with_the_current_revision_defines_it(io):
    first = io.Agent("dm", DM)
    assert first.ready

    second = io.Agent("dm", {**DM, "systemPrompt": "You are the ferryman."}, if_match=first.revision)
    assert second.ready
    third = io.Agent("dm", {**DM, "systemPrompt": "You are the innkeeper."}, if_match=second.etag)

    assert third.ready["systemPrompt"] == "You are the innkeeper."
    assert third.revision == 3


def test_if_match_over_a_revision_changed_since_raises_definition_changed(io, web, designer_key):
    mine = io.Agent("dm", DM)
    assert mine.ready
    elsewhere(web, designer_key, "dm", "Edited elsewhere.")

    stale = io.Agent("dm", {**DM, "systemPrompt": "You are the ferryman."}, if_match=mine.revision)

    with pytest.raises(StudioError) as refused:
        assert stale.ready
    assert (refused.value.code, refused.value.status) == ("definition_changed", 412)
    assert "revision 2" in refused.value.message
    assert stale.revision is None and stale.etag is None
    with pytest.raises(StudioError):
        stale.send("Hello.")
    shown = httpx.get(f"{web.url}/api/v1/agents/dm", headers=bearer(designer_key)).json()
    assert shown["systemPrompt"] == "Edited elsewhere."


@pytest.mark.parametrize("if_match", [0, -2, "", True, 1.5, {}])
def test_an_if_match_that_is_no_revision_is_refused_at_once(io, if_match):
    with pytest.raises(TypeError):
        io.Agent("dm", DM, if_match=if_match)


def test_the_asyncio_client_takes_if_match_too(web, designer_key):
    async def main():
        async with connect_async(web.url, designer_key) as io:
            first = io.Agent("dm", DM)
            await first.ready
            assert (first.revision, first.etag) == (1, '"1"')
            elsewhere(web, designer_key, "dm", "Edited elsewhere.")
            stale = io.Agent("dm", {**DM, "systemPrompt": "Mine."}, if_match=first.etag)
            with pytest.raises(StudioError) as refused:
                await stale.ready
            current = io.Agent("dm", {**DM, "systemPrompt": "Mine."}, if_match=2)
            await current.ready
            return refused.value.code, current.revision

    assert asyncio.run(main()) == ("definition_changed", 3)

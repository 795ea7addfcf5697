"""The largest input the limits allow, read everywhere. An agent imported
from a file as large as a request may be (`STUDIO_MAX_BODY_BYTES`), shaped
each hostile way the limits leave open — summaries at their limit of lines
all alike, hundreds of rewrites a diff would search again and again, a
rewrite of a memory near the store cap, a store at the cap in thousands of
memories, thousands of blocks — and every page and API read of it answers.
The work is what is bounded (a read's diffs make at most
DIFF_READ_MAX_COMPARISONS comparisons). How long each read takes is a
figure for bench/largest_inputs.py (its slowest read against a target), not
a test: a loaded machine's clock says nothing about the studio."""

import json
import os
import time

import pytest
from django.conf import settings

from agents.api.file_format import MODEL_TEXT_MAX_CHARS
from agents.history.diffs import DIFF_READ_MAX_COMPARISONS
from memories.store import memory_bytes, store_cap_bytes
from tests.support.agent_file import agent_file, block, change, checkpoint, memory, state

# Files as large as a request may be: left out of `make test-fast`.
pytestmark = [pytest.mark.django_db, pytest.mark.slow]

IMPORT = "/api/v1/agents/import"
API = "/api/v1/agents/big"
PAGE = "/studio/ashmere/agents/big/"

# Lines a diff would compare pair by pair: all alike, at the summary's limit.
ALIKE = "x\n" * (MODEL_TEXT_MAX_CHARS // 2)
# Lines that match every other line of the other text, never two in a row:
# a diff searches again after each match (within DIFF_MAX_LINES).
SEARCHED, SEARCHED_TOO = "a\n" * 600, "a\nb\n" * 300


def filled(document: dict, key: str, make) -> dict:
    """`document` with `make(index)` appended under `key` until the file is
    as large as a request body may be."""
    room = settings.DATA_UPLOAD_MAX_MEMORY_SIZE - len(json.dumps(document)) - 1_000
    items = document.setdefault(key, [])
    while True:
        item = make(len(items))
        room -= len(json.dumps(item)) + 2
        if room < 0:
            return document
        items.append(item)


def summaries_alike() -> dict:
    """Checkpoints whose summaries are the longest a file may carry, lines all alike."""
    return filled(agent_file("big"), "checkpoints", lambda i: checkpoint(i + 1, ALIKE[: len(ALIKE) - i * 2]))


def summaries_searched() -> dict:
    """Hundreds of checkpoints, each summary a diff searches again and again."""
    return filled(
        agent_file("big"), "checkpoints", lambda i: checkpoint(i + 1, (SEARCHED, SEARCHED_TOO)[i % 2])
    )


def rewrites_searched() -> dict:
    """Twenty memories, each rewritten (by the compactor, for checkpoint 1)
    into text a diff searches again and again."""
    names = [f"notes-{n}" for n in range(20)]
    document = agent_file(
        "big",
        memories=[memory(name, SEARCHED_TOO, is_open=False) for name in names],
        checkpoints=[checkpoint(1, "The story so far.")],
    )
    document["checkpoints"][0]["fromBlock"] = 1

    def rewrite(index: int) -> dict:
        name, texts = names[index % len(names)], (SEARCHED, SEARCHED_TOO)
        before, after = state(name, texts[index % 2]), state(name, texts[(index + 1) % 2])
        return change(name, "updated", before, after, by="compactor", checkpoint=1)

    return filled(document, "memoryHistory", rewrite)


def rewrite_near_the_cap() -> dict:
    """One memory rewritten from one long text of alike lines into another."""
    lines = (settings.DATA_UPLOAD_MAX_MEMORY_SIZE - 10_000) // 3 // len(json.dumps("x\n"))
    before, after = "x\n" * lines, "x\n" * (lines - 1) + "y\n"
    assert memory_bytes("notes", "About notes", before) <= store_cap_bytes()
    # Room to open it: it is a few hundred thousand tokens.
    config = {"memory": {"maxOpenTokens": 4_000_000}, "compaction": {"maxTokens": 10_000_000}}
    return agent_file(
        "big",
        config=config,
        memories=[memory("notes", after)],
        memoryHistory=[
            change("notes", "created", None, state("notes", before, is_open=False)),
            change("notes", "updated", state("notes", before), state("notes", after)),
        ],
    )


def store_at_the_cap() -> dict:
    """As many memories as a file holds, filling the store to its cap."""
    count = 7_000
    content = "m" * (store_cap_bytes() // count - len("memory-0000") - len("About memory-0000"))
    document = agent_file("big", memories=[memory(f"memory-{n:04}", content) for n in range(count)])
    assert len(json.dumps(document)) < settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return document


def many_blocks() -> dict:
    return filled(agent_file("big"), "blocks", lambda i: block(i + 1, f"I say {i}."))


SHAPES = [
    summaries_alike,
    summaries_searched,
    rewrites_searched,
    rewrite_near_the_cap,
    store_at_the_cap,
    many_blocks,
]


def reads(last_block: int, checkpoints: int, memory_name: str | None) -> list[str]:
    """Every page and API read of agent `big`."""
    paths = [
        "/studio/ashmere/agents/",
        PAGE,
        *(
            f"{PAGE}?fragment={name}"
            for name in ("stats", "context", "checkpoint", "compactions", "history", "timeline")
        ),
        f"{PAGE}memories/",
        *(f"{PAGE}memories/?fragment={name}" for name in ("budgets", "store", "memories")),
        f"{PAGE}checkpoints/",
        f"{PAGE}export/",
        "/api/v1/agents",
        API,
        f"{API}/history",
        f"{API}/turns",
        f"{API}/context",
        f"{API}/checkpoint",
        f"{API}/checkpoints",
        f"{API}/memories",
        f"{API}/compactions",
        f"{API}/export",
        "/api/v1/billing/lines?agent=big",
    ]
    for number in sorted({1, checkpoints}) if checkpoints else ():
        paths.append(f"{API}/checkpoints/{number}")
    if memory_name:
        paths += [f"{PAGE}memories/?memory={memory_name}", f"{API}/memories/{memory_name}/history"]
    for number in sorted({1, last_block}) if last_block else ():
        paths += [
            f"{PAGE}blocks/{number}/",
            f"{API}/memories?atBlock={number}",
            f"{API}/context?atBlock={number}",
        ]
    return paths


@pytest.mark.parametrize("shape", SHAPES, ids=[shape.__name__ for shape in SHAPES])
def test_every_read_of_the_largest_file_answers_with_its_work_bounded(
    admin_api, api, designer, comparisons, shape
):
    document = shape()
    assert len(json.dumps(document)) <= settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    imported = admin_api.post(IMPORT, document, format="json")
    assert imported.status_code == 201, imported.content[:500]
    memories = document.get("memories") or [{"name": None}]
    paths = reads(len(document.get("blocks", [])), len(document.get("checkpoints", [])), memories[0]["name"])

    took = {}
    for path in paths:
        client = designer if path.startswith("/studio/") else api
        comparisons.count = 0
        started = time.perf_counter()
        response = client.get(path)
        took[path] = time.perf_counter() - started
        assert response.status_code in (200, 404, 409), (path, response.status_code)
        if not path.endswith(("/checkpoint", "/history")):  # none yet, and none kept
            assert response.status_code != 404, path
        assert comparisons.count <= DIFF_READ_MAX_COMPARISONS + 2_000, path

    if figures := os.environ.get("STUDIO_BENCH_FIGURES"):  # bench/largest_inputs.py
        with open(figures, "a") as out:
            out.write(json.dumps({"shape": shape.__name__, "seconds": took}) + "\n")

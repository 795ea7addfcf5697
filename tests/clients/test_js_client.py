"""The JavaScript client (clients/js) against a real studio: its tests, the
spec's examples among them, run with Node's test runner against one Daphne
process on this run's PostgreSQL and Redis, on the `scripted` model as the
studio's default model, with a designer key of a game. And its TypeScript
declarations (index.d.ts), checked by TypeScript with the client's typed
usage (test/types/usage.ts), wrong uses included."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from agents.sending import sse
from tests.support import several_calls_model
from tests.support.out_of_credits import broke_game_key, capped_game_key
from tests.support.web import start_web, stop_web

CLIENT = Path(__file__).resolve().parents[2] / "clients" / "js"

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_javascript_clients_declarations_type_check():
    """`npm run typecheck`: `tsc` (TypeScript, a development package of the
    client) over index.d.ts and test/types/usage.ts, strict. A declaration
    that refuses the README's calls, or accepts a `@ts-expect-error` line's
    wrong one, fails it."""
    npm = shutil.which("npm")
    if npm is None:
        pytest.fail("npm is not installed: the JavaScript client's type check needs Node.js and npm.")
    if not (CLIENT / "node_modules" / "typescript").is_dir():
        pytest.fail(
            "clients/js/node_modules has no typescript: run `npm ci` in clients/js (`make test` does)."
        )
    run = subprocess.run(
        [npm, "run", "--silent", "typecheck"], cwd=CLIENT, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, f"npm run typecheck exited {run.returncode}:\n{run.stdout}\n{run.stderr}"


def test_the_javascript_client_passes_its_tests(designer_key, tmp_path):
    node = shutil.which("node")
    if node is None:
        pytest.fail(
            "Node.js is not installed: the JavaScript client's tests need `node` (18 or later) and npm."
        )
    if not (CLIENT / "node_modules" / "ws").is_dir():
        pytest.fail("clients/js/node_modules is missing: run `npm ci` in clients/js (`make test` does).")
    tests = sorted(str(path.relative_to(CLIENT)) for path in (CLIENT / "test").glob("*.test.js"))
    model = several_calls_model.start()
    servers, (url,) = start_web(
        tmp_path,
        1,
        STUDIO_ALLOW_SCRIPTED_MODEL="1",
        STUDIO_DEFAULT_MODEL="scripted",
        STUDIO_COMPACTION_RUNNER="thread",  # replays run in the background, as a worker would run them
        **several_calls_model.environment(model),
    )
    env = {
        **os.environ,
        "STUDIO_URL": url,
        "STUDIO_KEY": designer_key,
        "STUDIO_SEVERAL_CALLS_MODEL": several_calls_model.MODEL,
        # Games whose sends are refused for want of credits, each way (and each another game).
        "STUDIO_BROKE_KEY": broke_game_key(),
        "STUDIO_CAPPED_KEY": capped_game_key(),
        # The studio's own `stream_interrupted` event, which the client's tests end streams with.
        "STUDIO_STREAM_INTERRUPTED": json.dumps(sse.stream_interrupted("__agent__", "__turn__")),
    }
    try:
        run = subprocess.run(
            [node, "--test", *tests], cwd=CLIENT, env=env, capture_output=True, text=True, timeout=600
        )
    finally:
        stop_web(servers)
        model.stop()

    if run.returncode != 0:
        log = (tmp_path / "web0.log").read_text(errors="replace")[-5000:]
        pytest.fail(
            f"node --test exited {run.returncode}:\n{run.stdout}\n{run.stderr}\n--- the studio's log ---\n{log}",
            pytrace=False,
        )
    # A test skipped here would pass unseen: each has what it needs, but for
    # the check of the spec's examples in a checkout that is not beside the
    # spec (a clone elsewhere), which says so.
    spec_beside = Path(
        os.environ.get("STUDIO_SPEC") or CLIENT.parents[2] / "shared" / "spec" / "agent-memory.md"
    )
    if spec_beside.exists():
        assert "# skipped 0" in run.stdout, run.stdout[-3000:]
    else:
        assert "# skipped 1" in run.stdout and "# SKIP no spec at" in run.stdout, run.stdout[-3000:]

"""scripts/start.sh, the production runner for a host without systemd: it
installs and starts nothing but the Procfile's processes, starts again one
that exits while the others run on (where honcho would stop them all), and
on SIGTERM stops them all, waiting for each to finish."""

import os
import signal
import subprocess
import threading

import pytest

from tests.support.sources import ROOT

from ..conftest import wait_for

# scripts/start.sh runs, and starts processes.
pytestmark = pytest.mark.processes

SCRIPT = ROOT / "scripts" / "start.sh"


def start(tmp_path, procfile: str) -> subprocess.Popen:
    (tmp_path / "Procfile").write_text(procfile)
    env = {
        **os.environ,
        "PROCFILE": str(tmp_path / "Procfile"),
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "m"),
    }
    return subprocess.Popen(
        ["bash", str(SCRIPT)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def lines(path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_a_process_that_exits_is_started_again_alone_and_sigterm_stops_them_all(tmp_path):
    steady, runs, stopped = tmp_path / "steady.pids", tmp_path / "flaky.runs", tmp_path / "steady.stopped"
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "counter_1.db").write_text("left by the last run")
    script = start(
        tmp_path,
        f"# the studio's would be here\n"
        f'steady: sh -c \'echo $$ >> {steady}; trap "sleep 0.5; echo yes > {stopped}; exit 0" TERM; '
        f"while :; do sleep 0.1; done'\n"
        f"flaky: sh -c 'echo run >> {runs}; sleep 0.2; exit 3'\n",
    )
    try:
        wait_for(lambda: len(lines(runs)) >= 2)
        assert len(lines(steady)) == 1
        assert not (tmp_path / "m" / "counter_1.db").exists()

        script.send_signal(signal.SIGTERM)
        output, _ = script.communicate(timeout=60)
    finally:
        script.kill()

    assert script.returncode == 0, output
    assert lines(stopped) == ["yes"]  # sent SIGTERM, and given its time
    assert "[flaky] exited with status 3; starting it again in 1s" in output
    assert not subprocess.run(["pgrep", "-f", str(steady)], capture_output=True).stdout


def test_it_installs_nothing_and_starts_no_service():
    text = SCRIPT.read_text()

    for word in ("make ", "apt-get", "pip ", "services.sh", "migrate", "collectstatic"):
        assert word not in text, word


def test_it_keeps_going_while_a_process_fails_to_start(tmp_path):
    script = start(tmp_path, "broken: /nonexistent/command\n")
    said: list[str] = []
    reader = threading.Thread(target=lambda: said.extend(script.stdout), daemon=True)
    reader.start()
    try:
        # It has failed, and been started again, twice over: the runner goes on.
        wait_for(lambda: sum("[broken] exited with status 127" in line for line in said) >= 2)
        assert script.poll() is None
        script.send_signal(signal.SIGTERM)
        script.wait(60)
        reader.join(60)
    finally:
        script.kill()

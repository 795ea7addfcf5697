"""The files an operator deploys with, as they stand in the repository: the
systemd units in deploy/ (checked by systemd's own verifier where it is
installed) and the Procfile, which must start the processes as the units do."""

import re
import shutil
import subprocess

import pytest
from django.conf import settings

from tests.support.deploy import DEPLOY, daphne_options, unit
from tests.support.sources import ROOT

SERVICES = ["studio-web@.service", "studio-worker@.service", "studio-beat.service"]
UNITS = [*SERVICES, "studio-metrics.service", "studio-prune.service", "studio-prune.timer", "studio.target"]
HARDENING = {
    "NoNewPrivileges": "yes",
    "ProtectSystem": "strict",
    "PrivateTmp": "yes",
    "ProtectHome": "yes",
    "CapabilityBoundingSet": "",
}


def procfile() -> dict[str, str]:
    lines = (ROOT / "Procfile").read_text().splitlines()
    named = (line.split(":", 1) for line in lines if line.strip() and not line.startswith("#"))
    return {name: command.strip() for name, command in named}


@pytest.mark.processes
@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="systemd-analyze is not installed")
def test_systemd_finds_nothing_wrong_in_the_units(tmp_path):
    # As installed, but in this checkout (its .venv is there), with an
    # instance of each template.
    for name in UNITS:
        text = (DEPLOY / name).read_text().replace("/srv/studio", str(ROOT))
        (tmp_path / name.replace("@.", "@1.")).write_text(text)

    names = [name.replace("@.", "@1.") for name in UNITS]
    verified = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", *names],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert verified.returncode == 0, verified.stderr
    assert not [line for line in verified.stderr.splitlines() if "studio" in line], verified.stderr


@pytest.mark.parametrize("name", SERVICES)
def test_each_service_stops_in_its_time_restarts_and_is_hardened(name):
    service = unit(name)

    for key in ("TimeoutStopSec", "KillSignal", "KillMode", "Restart"):
        assert service[key], f"{name} has no {key}"
    for key, value in HARDENING.items():
        assert service[key] == [value], f"{name}: {key}={value}"


def test_the_daily_prune_is_hardened_and_given_longer_than_systemds_default_to_run():
    prune = unit("studio-prune.service")

    assert unit("studio-prune.timer")["OnCalendar"]
    assert prune["ExecStart"][0].endswith("manage.py prune")
    assert prune["TimeoutStartSec"] != ["90s"] and prune["TimeoutStartSec"]
    for key, value in HARDENING.items():
        assert prune[key] == [value], f"studio-prune.service: {key}={value}"


def test_a_web_process_is_given_longer_to_stop_than_its_grace():
    timeout = int(unit("studio-web@.service")["TimeoutStopSec"][0])

    assert timeout >= settings.STUDIO["SHUTDOWN_GRACE_SECONDS"] + 10


def test_a_worker_is_given_longer_to_stop_than_a_compaction_may_run():
    timeout = int(unit("studio-worker@.service")["TimeoutStopSec"][0])

    assert timeout > settings.STUDIO["COMPACTION_LEASE_SECONDS"]


@pytest.mark.parametrize("name", SERVICES)
def test_every_process_counts_its_metrics_in_the_directory_made_empty_when_the_studio_starts(name):
    directory = "/run/" + unit("studio-metrics.service")["RuntimeDirectory"][0]
    service = unit(name)

    assert f"PROMETHEUS_MULTIPROC_DIR={directory}" in service["Environment"]
    assert directory in service["ReadWritePaths"]
    assert "studio-metrics.service" in service["Requires"]
    assert "studio-metrics.service" in service["After"][0].split()


def test_the_web_unit_takes_the_client_address_from_nginx():
    assert daphne_options()[:3] == ["--proxy-headers", "--proxy-headers-host", "X-Real-IP"]
    assert "proxy_set_header X-Real-IP $remote_addr;" in (DEPLOY / "nginx.conf").read_text()


def test_the_web_unit_leaves_the_access_log_to_the_studio():
    # Daphne's own would log every request a second time, without its id.
    assert daphne_options()[3:] == ["-v", "0"]


def test_the_procfile_and_the_units_run_the_same_celery_processes():
    def without_schedule(command: str) -> str:  # where beat keeps it differs
        return command.split(" -s ")[0]

    beats = [without_schedule(c) for c in procfile().values() if " beat " in c]
    workers = [c for c in procfile().values() if " worker " in c]

    assert len(beats) == 1, "one beat per deployment"
    assert len(workers) == 2
    for name in ("studio-worker@.service", "studio-beat.service"):
        command = without_schedule(unit(name)["ExecStart"][0].removeprefix("/srv/studio/"))
        assert command.replace("worker%i@%H", "worker1@%h") in beats + workers


def test_the_procfile_starts_daphne_as_the_web_unit_does_on_the_ports_it_is_given():
    web = [command for name, command in procfile().items() if name.startswith("web")]

    assert len(web) == 2
    for command, port in zip(web, ("${PORT:-8001}", "${PORT2:-8002}"), strict=True):
        assert " ".join(daphne_options()) in command
        assert f"-p {port} " in command
    assert not re.search(r"-p \d", " ".join(procfile().values())), "a port written into the Procfile"

"""scripts/studioctl against the Procfile's own processes — two Daphne web
processes, two Celery workers and beat — run by scripts/start.sh, behind
deploy/nginx.conf: start, status, one process restarted, a rolling restart
that waits for nginx to send each web process requests again (no request
through nginx answered 502 meanwhile), stop. Configured as
docs/operating.md configures a studio: DJANGO_ALLOWED_HOSTS is the public
name, so a probe must send it as its Host."""

import http.client
import shutil
import ssl
import threading
import uuid
from collections import Counter

import pytest
from django.conf import settings

from tests.support.database import database_url_of_this_test_run
from tests.support.deployment import ROOT, Deployment
from tests.support.proxy import NGINX, Proxy

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not settings.REDIS_URL, reason="the Procfile's workers need Redis"),
    pytest.mark.skipif(
        NGINX is None, reason="nginx is not installed (scripts/services.sh installs Debian's)"
    ),
    pytest.mark.skipif(not shutil.which("openssl"), reason="openssl makes the proxy's certificate"),
]

TOKEN = "studioctl-test-metrics-token-4f1a"


@pytest.fixture
def deployment(tmp_path):
    proxy_folder = tmp_path / "nginx"
    proxy_folder.mkdir()
    deployment = Deployment(ROOT, tmp_path, {})
    proxy = Proxy(proxy_folder, deployment.ports)
    deployment.env_file.write_text(
        "".join(
            f"{name}={value}\n"
            for name, value in {
                "DATABASE_URL": database_url_of_this_test_run(),
                "REDIS_URL": settings.REDIS_URL,
                # Queues and events of this test's own on the shared Redis.
                "STUDIO_CHANNEL_PREFIX": f"{settings.CHANNEL_PREFIX}.ctl{uuid.uuid4().hex[:6]}",
                "DJANGO_SECRET_KEY": "studioctl-tests-only-secret-key-9d2e4b7a1c8f3e6d5b0a7c2e9f4d1b8a",
                "DJANGO_ALLOWED_HOSTS": "studio.example.com",
                "DJANGO_SECURE_PROXY": "1",
                "STUDIO_METRICS_TOKEN": TOKEN,
                "STUDIO_PROXY_URL": proxy.url,
                "STUDIO_SHUTDOWN_GRACE_SECONDS": "5",
            }.items()
        )
    )
    deployment.environment["SSL_CERT_FILE"] = str(proxy.cert)  # the proxy's certificate, trusted
    deployment.proxy = proxy
    yield deployment
    deployment.tear_down()
    proxy.stop()


class Load:
    """GET /healthz through nginx, over and over, counting each answer."""

    def __init__(self, proxy: Proxy):
        self.proxy, self.answers, self.stopping = proxy, Counter(), threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        context = ssl.create_default_context(cafile=self.proxy.cert)
        while not self.stopping.is_set():
            connection = http.client.HTTPSConnection(
                "127.0.0.1", self.proxy.https, context=context, timeout=30
            )
            try:
                connection.request("GET", "/healthz", headers={"Host": "studio.example.com"})
                self.answers[connection.getresponse().status] += 1
            except OSError as error:
                self.answers[type(error).__name__] += 1
            finally:
                connection.close()
            self.stopping.wait(0.02)

    def stop(self) -> Counter:
        self.stopping.set()
        self.thread.join(30)
        return self.answers


def test_status_restart_a_rolling_restart_behind_nginx_and_stop(deployment):
    deployment.ctl("start")
    before = deployment.status()
    assert before["healthy"] and before["supervisor"] == "scripts/start.sh"
    assert [row["name"] for row in before["processes"]] == ["web1", "web2", "worker1", "worker2", "beat"]
    webs = [row for row in before["processes"] if row["kind"] == "web"]
    assert [row["port"] for row in webs] == deployment.ports
    assert all(row["ready"] and row["readiness"] in ("ok", "degraded") for row in webs)
    assert "web1" in deployment.ctl("status").stdout  # and for people, a table

    restarted = deployment.ctl("restart", "worker1")
    after_one = deployment.pids()
    assert after_one["worker1"] != before_pids(before)["worker1"], restarted.stdout
    assert {name: pid for name, pid in after_one.items() if name != "worker1"} == {
        name: pid for name, pid in before_pids(before).items() if name != "worker1"
    }

    load = Load(deployment.proxy)
    rolled = deployment.ctl("rolling-restart")
    answers = load.stop()
    after = deployment.status()

    assert "rolling restart done" in rolled.stdout
    assert rolled.stdout.index("restarting web1") < rolled.stdout.index("restarting web2")
    assert rolled.stdout.index("restarting web2") < rolled.stdout.index("restarting worker1")
    assert not set(after_one.values()) & {row["pid"] for row in after["processes"]}  # every one anew
    assert after["healthy"]
    assert {row["name"]: row["starts"] for row in after["processes"]} == {
        "web1": 2, "web2": 2, "worker1": 3, "worker2": 2, "beat": 2,
    }  # fmt: skip
    assert answers[200] > 0 and set(answers) == {200}, answers  # never a 502: each web process back first

    deployment.ctl("stop")
    stopped = deployment.status()
    assert stopped["supervisorPid"] is None
    assert not any(row["running"] for row in stopped["processes"]) and not stopped["healthy"]


def test_restarting_a_process_that_is_not_there_names_those_that_are(deployment):
    deployment.ctl("start")

    refused = deployment.ctl("restart", "web3", check=False)

    assert refused.returncode == 1
    assert "no process 'web3': the processes are web1, web2, worker1, worker2, beat" in refused.stderr


def before_pids(status: dict) -> dict[str, int]:
    return {row["name"]: row["pid"] for row in status["processes"]}

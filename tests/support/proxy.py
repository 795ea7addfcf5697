"""deploy/nginx.conf run by Debian's nginx in front of web processes on
the given ports, over TLS with a certificate made here: only the
upstream's ports, the listening ports, the certificate's and the access
log's paths (and, when asked, the rate per client address) are changed."""

import os
import pwd
import re
import shutil
import signal
import ssl
import subprocess
import time
from pathlib import Path

import httpx2

from bench.launcher import free_port

ROOT = Path(__file__).resolve().parents[2]
NGINX = shutil.which("nginx", path=f"{os.environ.get('PATH', '')}:/usr/sbin")
CERTIFICATE_PATHS = {
    "cert": "/etc/letsencrypt/live/studio.example.com/fullchain.pem",
    "key": "/etc/letsencrypt/live/studio.example.com/privkey.pem",
}


def certificate(folder: Path) -> tuple[Path, Path]:
    """A self-signed certificate for studio.example.com and 127.0.0.1."""
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-days", "1", "-subj", "/CN=studio.example.com",
            "-addext", "subjectAltName=DNS:studio.example.com,IP:127.0.0.1",
            "-keyout", str(key), "-out", str(cert),
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


def site(
    ports: list[int], https: int, http: int, cert: Path, key: Path, access_log: Path, rate: str | None = None
) -> str:
    """deploy/nginx.conf with its upstream on `ports`, listening on loopback,
    its access log at `access_log`, and each client address allowed `rate`
    (the file's own when None). Each line changed is found exactly once: a
    change to the file's shape fails here rather than testing another file."""
    text = (ROOT / "deploy" / "nginx.conf").read_text()
    upstream = re.search(r"upstream studio \{.*?\n\}", text, flags=re.S)[0]
    servers = re.findall(r"server 127\.0\.0\.1:\d+", upstream)
    assert len(servers) == len(ports), f"deploy/nginx.conf's upstream should list {len(ports)} servers"
    moved = upstream
    for server, port in zip(servers, ports, strict=True):
        moved = moved.replace(server, f"server 127.0.0.1:{port}", 1)
    text = text.replace(upstream, moved)
    for old, new in {
        "listen 443 ssl;": f"listen 127.0.0.1:{https} ssl;",
        "listen 80;": f"listen 127.0.0.1:{http};",
        CERTIFICATE_PATHS["cert"]: str(cert),
        CERTIFICATE_PATHS["key"]: str(key),
        "/var/log/nginx/studio.access.log": str(access_log),
        **({"rate=50r/s": f"rate={rate}"} if rate else {}),
    }.items():
        assert text.count(old) == 1, f"deploy/nginx.conf should have {old!r} once"
        text = text.replace(old, new)
    return text


class Proxy:
    """nginx in the foreground, everything it writes under `folder`."""

    def __init__(self, folder: Path, ports: list[int], *, rate: str | None = None):
        self.folder, self.https, self.http = folder, free_port(), free_port()
        self.cert, key = certificate(folder)
        self.access_log = folder / "studio.access.log"
        conf = site(ports, self.https, self.http, self.cert, key, self.access_log, rate)
        (folder / "studio.conf").write_text(conf)
        temp = "\n".join(
            f"{kind}_temp_path {folder / kind};"
            for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
        )
        (folder / "nginx.conf").write_text(
            f"user {pwd.getpwuid(os.getuid()).pw_name};\nworker_processes 1;\npid {folder / 'nginx.pid'};\n"
            f"error_log {folder / 'error.log'} warn;\nevents {{ worker_connections 256; }}\n"
            f"http {{\n access_log {folder / 'access.log'};\n {temp}\n include {folder / 'studio.conf'};\n}}\n"
        )
        command = [
            NGINX,
            "-p",
            str(folder),
            "-e",
            str(folder / "error.log"),
            "-c",
            str(folder / "nginx.conf"),
        ]
        checked = subprocess.run([*command, "-t"], capture_output=True, text=True)
        assert checked.returncode == 0, checked.stderr
        self.process = subprocess.Popen([*command, "-g", "daemon off;"], stderr=subprocess.DEVNULL)
        self._wait_listening()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.https}"

    def _wait_listening(self) -> None:
        deadline = time.monotonic() + 60  # only a hang takes this, however loaded the machine
        while time.monotonic() < deadline:
            try:
                httpx2.get(f"http://127.0.0.1:{self.http}/", timeout=5)
                return
            except httpx2.TransportError:
                time.sleep(0.05)
        raise RuntimeError((self.folder / "error.log").read_text())

    def client(self, *, source: str = "127.0.0.1", **options) -> httpx2.Client:
        """A client of the proxy's TLS port, trusting its certificate, from `source`."""
        transport = httpx2.HTTPTransport(
            verify=ssl.create_default_context(cafile=self.cert), local_address=source
        )
        return httpx2.Client(base_url=self.url, transport=transport, timeout=30, **options)

    def told(self, upstream) -> str:
        """What to read when a request through the proxy went unanswered:
        nginx's errors and its access lines, who listens on the upstream's
        port (`upstream`: a bench.launcher.Daphne) and its log's end."""
        listening = (
            subprocess.run(
                ["ss", "-Hltnp", f"sport = :{upstream.port}"], capture_output=True, text=True
            ).stdout
            if shutil.which("ss")
            else "(ss is not installed)"
        )
        alive = "running" if upstream.process.poll() is None else f"exited {upstream.process.returncode}"
        parts = {
            "nginx's error log": self.folder / "error.log",
            "nginx's access log": self.access_log,
            f"the web process {upstream.pid} ({alive}); on its port: {listening.strip() or 'nothing'}": upstream.log,
        }
        return "\n".join(
            f"--- {title}:\n{path.read_text(errors='replace')[-4000:] if path.exists() else '(none)'}"
            for title, path in parts.items()
        )

    def stop(self) -> None:
        self.process.send_signal(signal.SIGQUIT)
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)

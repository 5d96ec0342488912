"""Real services on loopback for tests and benchmarks: a MinIO S3 server and a toxiproxy in front of it.

Binaries come from ``ci/install_services.sh`` (cached in ``~/go/bin``); ``XARRAY_ZARRMAX_MINIO`` and
``XARRAY_ZARRMAX_TOXIPROXY`` override their paths. Nothing here listens beyond 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ACCESS_KEY = "zarrmax-test"
SECRET_KEY = "zarrmax-test-secret-key"


def _find_binary(env: str, name: str) -> str | None:
    explicit = os.environ.get(env)
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    gobin = os.environ.get("GOBIN") or os.path.join(os.environ.get("GOPATH", os.path.expanduser("~/go")), "bin")
    candidate = os.path.join(gobin, name)
    if os.access(candidate, os.X_OK):
        return candidate
    return shutil.which(name)


def minio_binary() -> str | None:
    return _find_binary("XARRAY_ZARRMAX_MINIO", "minio")


def toxiproxy_binaries() -> tuple[str, str] | None:
    server = _find_binary("XARRAY_ZARRMAX_TOXIPROXY", "server")
    if server is None:
        return None
    cli = os.path.join(os.path.dirname(server), "cli")
    return (server, cli) if os.access(cli, os.X_OK) else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_http(url: str, timeout: float, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited with {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{url} did not answer within {timeout} s; log: {log.read_text()[-2000:]}")


@dataclass
class MinioServer:
    """A MinIO server on a free loopback port with its own data directory; buckets are made as folders.

    ``env``: more of MinIO's environment, e.g. a request limit (`throttled`)."""

    binary: str
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="zarrmax-minio-")))
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    env: dict[str, str] = field(default_factory=dict)

    @classmethod
    def throttled(cls, binary: str, requests_max: int, deadline: str = "100ms") -> MinioServer:
        """A server (not started) that serves at most ``requests_max`` requests at once and refuses the rest
        as overloaded (MinIO answers 429 Too Many Requests; AWS S3 503 Slow Down) once they waited
        ``deadline`` for a slot (in practice at once, in the MinIO release tested)."""
        return cls(binary, env={"MINIO_API_REQUESTS_MAX": str(requests_max),
                                "MINIO_API_REQUESTS_DEADLINE": deadline})

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def make_bucket(self, name: str) -> str:
        # MinIO serves a top-level folder of its data directory as a bucket: no client needed.
        if not re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", name):
            raise ValueError(f"expected an S3 bucket name (3-63 of a-z, 0-9, '.', '-'). Got {name!r} instead.")
        (self.root / "data" / name).mkdir(parents=True, exist_ok=True)
        return name

    def start(self) -> MinioServer:
        (self.root / "data").mkdir(parents=True, exist_ok=True)
        log = self.root / "minio.log"
        env = {**os.environ, "MINIO_ROOT_USER": ACCESS_KEY, "MINIO_ROOT_PASSWORD": SECRET_KEY,
               "MINIO_BROWSER": "off", "MINIO_UPDATE": "off", **self.env}
        self.proc = subprocess.Popen(
            [self.binary, "server", str(self.root / "data"), "--address", f"127.0.0.1:{self.port}",
             "--console-address", f"127.0.0.1:{free_port()}"],
            stdout=open(log, "wb"), stderr=subprocess.STDOUT, env=env,
        )
        _wait_http(f"{self.endpoint}/minio/health/live", 60, self.proc, log)
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.proc = None

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def storage_options(self, endpoint: str | None = None) -> dict[str, Any]:
        return {"endpoint": endpoint or self.endpoint, "access_key_id": ACCESS_KEY,
                "secret_access_key": SECRET_KEY, "region": "us-east-1"}

    def obstore(self, bucket: str, prefix: str = "", endpoint: str | None = None) -> Any:
        from obstore.store import S3Store

        return S3Store(bucket, prefix=prefix or None, client_options={"allow_http": True},
                       **self.storage_options(endpoint))


@dataclass
class Toxiproxy:
    """toxiproxy's server on loopback, driven through its HTTP API."""

    server_binary: str
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="zarrmax-toxiproxy-")))

    def start(self) -> Toxiproxy:
        log = self.root / "toxiproxy.log"
        self.proc = subprocess.Popen([self.server_binary, "-host", "127.0.0.1", "-port", str(self.port)],
                                     stdout=open(log, "wb"), stderr=subprocess.STDOUT)
        _wait_http(f"http://127.0.0.1:{self.port}/version", 30, self.proc, log)
        return self

    def _api(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            raw = r.read()
        return json.loads(raw) if raw else None

    def proxy(self, name: str, upstream_port: int) -> str:
        """Create a proxy to ``127.0.0.1:upstream_port``; returns its endpoint URL."""
        listen = free_port()
        self._api("POST", "/proxies", {"name": name, "listen": f"127.0.0.1:{listen}",
                                       "upstream": f"127.0.0.1:{upstream_port}", "enabled": True})
        return f"http://127.0.0.1:{listen}"

    def add_toxic(self, proxy: str, kind: str, stream: str = "downstream", toxicity: float = 1.0,
                  **attributes: Any) -> str:
        name = f"{kind}_{stream}"
        self._api("POST", f"/proxies/{proxy}/toxics", {"name": name, "type": kind, "stream": stream,
                                                       "toxicity": toxicity, "attributes": attributes})
        return name

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        self.proc = None
        shutil.rmtree(self.root, ignore_errors=True)

"""The tests' servers: the real `auditmem` binary (`AUDITMEM_BIN`, default the cargo-built
debug one) on a free loopback port, with a temporary data dir and an admin token, and a real
`auditmem witness serve` that cosigns its checkpoints."""

from __future__ import annotations

import os
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[3]
ADMIN_TOKEN = "test-admin-token-3f9c1d27b5e8a046"
ORIGIN = "auditmem.localhost/log"
WITNESS_NAME = "witness.test/w1"
PERMISSIONS = [
    "audit.read",
    "audit.export",
    "memory.read",
    "memory.write",
    "memory.erase",
]


def binary() -> str:
    return os.environ.get("AUDITMEM_BIN") or str(REPO / "target" / "debug" / "auditmem")


def _spawn(
    args: list[str], wait_for: str, also: str | None = None
) -> tuple[subprocess.Popen, str, str | None]:
    """Starts `auditmem ARGS` and reads its stdout until the line starting `wait_for`; returns
    the process, the rest of that line and the rest of the line starting `also` (if any).
    """
    proc = subprocess.Popen(
        [binary(), *args],
        cwd=REPO,
        env={
            **os.environ,
            "AUDITMEM_ADMIN_TOKEN": ADMIN_TOKEN,
            "AUDITMEM_LOG": "error",
        },
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    other = None
    deadline = time.monotonic() + 120
    for line in proc.stdout:
        if also and line.startswith(also):
            other = line[len(also) :].strip()
        if line.startswith(wait_for):
            # Keep draining stdout so the child never blocks on a full pipe.
            threading.Thread(
                target=lambda: [None for _ in proc.stdout], daemon=True
            ).start()
            return proc, line[len(wait_for) :].strip(), other
        assert time.monotonic() < deadline, f"{args[0]} did not start in time"
    raise AssertionError(f"auditmem {' '.join(args[:2])} exited before listening")


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@dataclass
class Server:
    url: str
    key: str
    tenant: str
    log_key: str
    """The log's signed-note verifier key, pinned from the key file, not from the server."""
    public_key: str
    witness_key: str
    dir: Path

    def admin(
        self, method: str, path: str, json: object | None = None
    ) -> httpx.Response:
        return httpx.request(
            method,
            self.url + path,
            json=json,
            headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
            timeout=60,
        )

    def new_key(
        self, tenant: str | None = None, permissions: list[str] | None = None
    ) -> str:
        r = self.admin(
            "POST",
            f"/admin/v1/tenants/{tenant or self.tenant}/keys",
            {"permissions": permissions or PERMISSIONS},
        )
        assert r.status_code == 201, r.text
        return r.json()["data"]["api_key"]

    def new_tenant(self, plan: str = "business") -> tuple[str, str]:
        r = self.admin(
            "POST",
            "/admin/v1/tenants",
            {"name": f"t-{plan}", "plan": plan, "credits": 100},
        )
        assert r.status_code == 201, r.text
        tenant = r.json()["data"]["id"]
        return tenant, self.new_key(tenant)


def start_server(tmp: Path, extra: list[str]) -> tuple[subprocess.Popen, str, str, str]:
    """A server on its own data dir; (process, URL, verifier key, hex public key)."""
    key_file = tmp / "signing.key"
    out = subprocess.run(
        [
            binary(),
            "admin",
            "pubkey",
            "--signing-key",
            str(key_file),
            "--origin",
            ORIGIN,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    hex_key = subprocess.run(
        [binary(), "admin", "pubkey", "--signing-key", str(key_file)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    proc, url, _ = _spawn(
        [
            "serve",
            "--data-dir",
            str(tmp / "data"),
            "--listen",
            "127.0.0.1:0",
            "--signing-key",
            str(key_file),
            "--checkpoints-file",
            str(tmp / "checkpoints.ndjson"),
            "--model-dir",
            str(REPO / "models" / "all-MiniLM-L6-v2"),
            "--log-origin",
            ORIGIN,
            *extra,
        ],
        "auditmem listening on ",
    )
    return proc, url, out.splitlines()[-1].strip(), hex_key.splitlines()[-1].strip()


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    with tempfile.TemporaryDirectory(prefix="auditmem-sdk-") as d:
        tmp = Path(d)
        key_file = tmp / "signing.key"
        log_key = (
            subprocess.run(
                [
                    binary(),
                    "admin",
                    "pubkey",
                    "--signing-key",
                    str(key_file),
                    "--origin",
                    ORIGIN,
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            .stdout.strip()
            .splitlines()[-1]
        )
        witness, witness_url, witness_key = _spawn(
            [
                "witness",
                "serve",
                "--state-dir",
                str(tmp / "witness"),
                "--listen",
                "127.0.0.1:0",
                "--name",
                WITNESS_NAME,
                "--log",
                f"{ORIGIN}={log_key}",
            ],
            "auditmem witness listening on ",
            also="auditmem witness key ",
        )
        try:
            proc, url, vkey, hex_key = start_server(
                tmp, ["--witness", witness_url, "--consistency-wait-ms", "100"]
            )
            assert vkey == log_key
            try:
                s = Server(url, "", "", log_key, hex_key, witness_key or "", tmp)
                s.tenant, s.key = s.new_tenant("business")
                yield s
            finally:
                _stop(proc)
        finally:
            _stop(witness)


def pytest_sessionstart(session: pytest.Session) -> None:
    # `cargo test --test it python_sdk` installs the wheel it built and sets this: the suite
    # must then test that wheel, not the source tree.
    if os.environ.get("AUDITMEM_SDK_FROM_WHEEL") == "1":
        import auditmem

        assert "site-packages" in Path(auditmem.__file__).parts, auditmem.__file__

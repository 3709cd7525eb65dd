"""Start and stop a private Azurite on free loopback ports, with disk persistence.

Used by the test session, the benchmarks and ``make demo-azure``. Azurite is found at
``$AZURITE_BIN`` or in ``.tools/azurite`` (where ``make azurite`` installs it from npm).
Free ports (never 10000-10002) keep a leftover instance from answering for ours; disk
persistence in a fresh temp folder avoids the in-memory mode's minute-long sweeps.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_BIN = ROOT / ".tools" / "azurite" / "node_modules" / ".bin" / "azurite"

#: Azurite's fixed development account and key (public, documented by Microsoft).
ACCOUNT = "devstoreaccount1"
ACCOUNT_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)


class AzuriteMissing(RuntimeError):
    """Azurite is not installed where we look."""


def find_binary() -> Path:
    """The Azurite launcher, or AzuriteMissing saying how to install it."""
    configured = os.environ.get("AZURITE_BIN")
    candidates = [Path(configured)] if configured else [DEFAULT_BIN]
    found = shutil.which("azurite")
    if not configured and found:
        candidates.append(Path(found))
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    raise AzuriteMissing(
        f"Azurite not found at {candidates[0]}; run `make azurite` (installs it from npm "
        "into .tools/azurite) or set AZURITE_BIN"
    )


def installed_version() -> str:
    """The version of the Azurite that :func:`find_binary` finds, from its package.json."""
    for folder in find_binary().resolve().parents:
        package = folder / "package.json"
        if package.is_file():
            try:
                return str(json.loads(package.read_text())["version"])
            except (OSError, ValueError, KeyError):
                break
    return "unknown"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def connection_string(blob_port: int, queue_port: int, table_port: int) -> str:
    """The connection string of the development account on these loopback ports (an
    Azurite's own, or a proxy's in front of it)."""
    base = "http://127.0.0.1"
    return (
        f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY};"
        f"BlobEndpoint={base}:{blob_port}/{ACCOUNT};"
        f"QueueEndpoint={base}:{queue_port}/{ACCOUNT};"
        f"TableEndpoint={base}:{table_port}/{ACCOUNT};"
    )


@dataclass
class Azurite:
    """A running Azurite; use :func:`start` to make one and :meth:`stop` to end it."""

    process: subprocess.Popen[bytes]
    workspace: Path
    blob_port: int
    queue_port: int
    table_port: int
    owns_workspace: bool = field(default=True)

    @property
    def connection_string(self) -> str:
        return connection_string(self.blob_port, self.queue_port, self.table_port)

    def stop(self, timeout_seconds: float = 10.0) -> None:
        """SIGTERM, wait for the process to exit (SIGKILL after the bound), clean up."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout_seconds)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout_seconds)
        if self.owns_workspace:
            shutil.rmtree(self.workspace, ignore_errors=True)

    def __enter__(self) -> Azurite:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start(workspace: Path | None = None, ready_timeout_seconds: float = 30.0) -> Azurite:
    """Start Azurite with disk persistence in ``workspace`` (a fresh temp folder if None)."""
    binary = find_binary()
    owns = workspace is None
    workspace = Path(tempfile.mkdtemp(prefix="azurite-")) if workspace is None else workspace
    workspace.mkdir(parents=True, exist_ok=True)
    ports = {name: free_port() for name in ("blob", "queue", "table")}
    command = [
        str(binary),
        "--silent",
        "--skipApiVersionCheck",
        "--disableTelemetry",
        "--location",
        str(workspace),
    ]
    for name, port in ports.items():
        command += [f"--{name}Host", "127.0.0.1", f"--{name}Port", str(port)]
    log = open(workspace / "azurite.log", "wb")  # noqa: SIM115 - closed with the process
    process = subprocess.Popen(
        command,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    log.close()
    azurite = Azurite(process, workspace, ports["blob"], ports["queue"], ports["table"], owns)
    deadline = time.monotonic() + ready_timeout_seconds
    while not all(_accepts(port) for port in ports.values()):
        if process.poll() is not None or time.monotonic() > deadline:
            tail = (workspace / "azurite.log").read_text(errors="replace")[-2000:]
            azurite.stop()
            raise RuntimeError(f"Azurite did not start (exit {process.poll()}): {tail}")
        time.sleep(0.1)
    return azurite


def main() -> None:
    """``python -m tests.azurite``: run one in the foreground, printing its connection string."""
    with start() as azurite:
        print(azurite.connection_string, flush=True)
        try:
            azurite.process.wait()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()

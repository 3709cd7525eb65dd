"""An HTTP fault proxy on loopback, in front of one Azurite service (or any HTTP server).

Per request, by seeded chance, :class:`FaultProxy`:

- ``busy``: answers 503 ServerBusy (``x-ms-error-code: ServerBusy``, an Azure-style XML
  body, or JSON when the client asks for JSON as the table SDK does) *without*
  forwarding: nothing is applied;
- ``ambiguous``: forwards the request, reads the whole answer (so the request is
  applied) and closes the client's connection without writing a byte of it;
- ``delayed``: waits 0.3-1.5 s, then forwards;

and, during an outage (:meth:`FaultProxy.outage`, over by itself), forwards nothing:
``refused`` resets every connection as it is accepted and every request on one kept
alive; ``hanging`` answers no request until the outage ends, then resets its connection.

Everything else is forwarded as is: the request line, headers (Host included, so
SharedKey signatures still match) and body, chunked or not (``$batch`` multipart bodies
are just bytes here); the answer likewise. Client connections are kept alive, each with
its own upstream connection. Requests and faults are counted by kind and HTTP method.

Standard library only. Use it from code (:class:`FaultProxy`, ``start`` / ``stop`` or
``serve_for``) or from a shell, one proxy per target port::

    python -m tests.chaos.proxy --target-port 10001 --target-port 10002 \\
        --busy 0.05 --ambiguous 0.03 --delayed 0.05 --seed 1 --seconds 600 \\
        --outage-after 120 --outage-seconds 60 --outage-mode hanging
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import socket
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

#: Headers about one hop, not the request: never passed on.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
#: A kept-alive client connection idle this long is closed (its thread ends).
IDLE_SECONDS = 60.0
#: An upstream connection idle this long is replaced before use (Node closes at 5 s).
UPSTREAM_IDLE_SECONDS = 3.0
#: Bound of one forwarded request (Azurite answers in milliseconds when well).
UPSTREAM_TIMEOUT_SECONDS = 60.0


@dataclass
class FaultChances:
    """Chances per request (their sum at most 1) and the delay range in seconds."""

    busy: float = 0.0
    ambiguous: float = 0.0
    delayed: float = 0.0
    delay_seconds: tuple[float, float] = (0.3, 1.5)

    def __post_init__(self) -> None:
        chances = (self.busy, self.ambiguous, self.delayed)
        if any(not 0.0 <= chance <= 1.0 for chance in chances) or sum(chances) > 1.0:
            raise ValueError(f"fault chances {chances} must each be in [0, 1], sum <= 1")


@dataclass
class ProxyCounts:
    """Requests by HTTP method; faults by kind and by ``kind method``."""

    requests: Counter[str] = field(default_factory=Counter)
    faults: Counter[str] = field(default_factory=Counter)
    faults_by_method: Counter[str] = field(default_factory=Counter)
    upstream_errors: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def count(self, method: str, fault: str | None) -> None:
        with self._lock:
            self.requests[method] += 1
            if fault is not None:
                self.faults[fault] += 1
                self.faults_by_method[f"{fault} {method}"] += 1

    def upstream_error(self) -> None:
        with self._lock:
            self.upstream_errors += 1

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {
                "requests": dict(self.requests),
                "faults": dict(self.faults),
                "faults_by_method": dict(self.faults_by_method),
                "upstream_errors": self.upstream_errors,
            }


#: Kinds of outage: every connection reset at once, or every request left unanswered.
OUTAGE_MODES = ("refused", "hanging")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    proxy: FaultProxy

    def verify_request(self, request: Any, client_address: Any) -> bool:
        # A refusing proxy takes no new connection: reset as soon as it is accepted.
        down = self.proxy.down()
        if down is not None and down[0] == "refused":
            self.proxy.counts.count("(connection)", "refused")
            _linger_zero(request)
            return False
        return True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that resets its connection (a SIGKILLed worker) is expected here;
        # anything else is printed as the base class does.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class FaultProxy:
    """One listening port on 127.0.0.1 forwarding to ``127.0.0.1:target_port``.

    Args:
        target_port: the service behind (one Azurite service port).
        chances: what to do how often.
        seed: makes the sequence of decisions repeatable (threads still interleave).
        port: where to listen; 0 for a free port (see :attr:`port`).
    """

    def __init__(self, target_port: int, chances: FaultChances, seed: int = 0, port: int = 0):
        self.target_port = target_port
        self.chances = chances
        self.counts = ProxyCounts()
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._outage: tuple[str, float] | None = None  # mode, monotonic end
        self._server = _Server(("127.0.0.1", port), _Handler)
        self._server.proxy = self
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def decide(self) -> tuple[str | None, float]:
        """This request's fault (None, "busy", "ambiguous" or "delayed") and delay."""
        chances = self.chances
        with self._lock:
            roll = self._rng.random()
            if roll < chances.busy:
                return "busy", 0.0
            if roll < chances.busy + chances.ambiguous:
                return "ambiguous", 0.0
            if roll < chances.busy + chances.ambiguous + chances.delayed:
                return "delayed", self._rng.uniform(*chances.delay_seconds)
        return None, 0.0

    def outage(self, seconds: float, mode: str = "refused") -> None:
        """Be down from now for ``seconds`` (``refused`` or ``hanging``); back by itself."""
        if mode not in OUTAGE_MODES or seconds < 0:
            raise ValueError(f"an outage is {' or '.join(OUTAGE_MODES)} for >= 0 s")
        with self._lock:
            self._outage = (mode, time.monotonic() + seconds)

    def down(self) -> tuple[str, float] | None:
        """The outage's mode and seconds left, or None when the proxy is up."""
        with self._lock:
            if self._outage is None:
                return None
            mode, end = self._outage
        left = end - time.monotonic()
        return (mode, left) if left > 0 else None

    def start(self) -> FaultProxy:
        """Serve on a thread of its own until :meth:`stop`."""
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.1},
            name=f"fault-proxy-{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop accepting and close the listening socket (idempotent). Connections being
        served end with their client or after :data:`IDLE_SECONDS`."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(10)
            self._thread = None
        self._server.server_close()

    def serve_for(self, seconds: float) -> None:
        """Serve for ``seconds`` (or until interrupted), then stop."""
        self.start()
        try:
            time.sleep(seconds)
        finally:
            self.stop()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the Azure SDK expects
    timeout = IDLE_SECONDS
    server: _Server

    def setup(self) -> None:
        super().setup()
        self._upstream: http.client.HTTPConnection | None = None
        self._upstream_used = 0.0

    def finish(self) -> None:
        if self._upstream is not None:
            self._upstream.close()
        super().finish()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        pass  # one line per request would bury everything else

    def __getattr__(self, name: str) -> Any:
        if name.startswith("do_"):
            return self._proxy  # every method: GET, PUT, POST, MERGE, PATCH, DELETE, ...
        raise AttributeError(name)

    def _proxy(self) -> None:
        proxy = self.server.proxy
        body = self._read_body()
        down = proxy.down()
        if down is not None:
            # Nothing forwarded, nothing answered: the store is out of reach.
            mode, left = down
            proxy.counts.count(self.command, mode)
            if mode == "hanging":
                time.sleep(left)
            self.close_connection = True
            self._reset()
            return
        fault, delay = proxy.decide()
        proxy.counts.count(self.command, fault)
        if fault == "busy":
            self._answer_busy()
            return
        if fault == "delayed":
            time.sleep(delay)
        answer = self._forward(body)
        if answer is None:
            proxy.counts.upstream_error()
            self.close_connection = True
            return
        if fault == "ambiguous":
            # Applied upstream; the client learns nothing. Drop the connection hard.
            self.close_connection = True
            self._reset()
            return
        self._write_answer(*answer)

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            parts = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _forward(self, body: bytes) -> tuple[int, str, list[tuple[str, str]], bytes] | None:
        headers = [(k, v) for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP]
        chunked = "chunked" in self.headers.get("Transfer-Encoding", "").lower()
        if chunked:  # passed on de-chunked, with its length
            headers = [(k, v) for k, v in headers if k.lower() != "content-length"]
            headers.append(("Content-Length", str(len(body))))
        for attempt in range(2):  # a kept-alive upstream connection may have gone stale
            upstream = self._upstream_connection()
            try:
                upstream.putrequest(
                    self.command, self.path, skip_host=True, skip_accept_encoding=True
                )
                for key, value in headers:
                    upstream.putheader(key, value)
                upstream.endheaders(
                    body
                    if body or chunked or self.command in ("POST", "PUT", "PATCH", "MERGE")
                    else None
                )
                response = upstream.getresponse()
                content = response.read()
                return response.status, response.reason, response.getheaders(), content
            except (OSError, http.client.HTTPException):
                upstream.close()
                self._upstream = None
                if attempt:
                    return None
        return None

    def _upstream_connection(self) -> http.client.HTTPConnection:
        # Azurite (Node) closes a connection idle for 5 s: start afresh well before, so
        # a request is never sent on a connection being closed under it.
        now = time.monotonic()
        if self._upstream is not None and now - self._upstream_used > UPSTREAM_IDLE_SECONDS:
            self._upstream.close()
            self._upstream = None
        self._upstream_used = now
        if self._upstream is None:
            self._upstream = http.client.HTTPConnection(
                "127.0.0.1", self.server.proxy.target_port, timeout=UPSTREAM_TIMEOUT_SECONDS
            )
        return self._upstream

    def _write_answer(
        self, status: int, reason: str, headers: list[tuple[str, str]], content: bytes
    ) -> None:
        self.send_response_only(status, reason)
        bodiless = self.command == "HEAD" or status in (204, 304) or 100 <= status < 200
        for key, value in headers:
            lowered = key.lower()
            if lowered in HOP_BY_HOP or (lowered == "content-length" and not bodiless):
                continue
            self.send_header(key, value)
        if not bodiless:
            self.send_header("Content-Length", str(len(content)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if not bodiless:
            self.wfile.write(content)

    def _answer_busy(self) -> None:
        message = "The server is currently unable to receive requests. Please retry your request."
        if "json" in self.headers.get("Accept", ""):
            content = json.dumps(
                {
                    "odata.error": {
                        "code": "ServerBusy",
                        "message": {"lang": "en-US", "value": message},
                    }
                }
            ).encode()
            kind = "application/json;odata=minimalmetadata;streaming=true;charset=utf-8"
        else:
            content = (
                '<?xml version="1.0" encoding="utf-8"?><Error><Code>ServerBusy</Code>'
                f"<Message>{message}</Message></Error>"
            ).encode()
            kind = "application/xml"
        headers = [("Content-Type", kind), ("x-ms-error-code", "ServerBusy")]
        request_id = self.headers.get("x-ms-client-request-id")
        if request_id:
            headers.append(("x-ms-client-request-id", request_id))
        self._write_answer(503, "Server Busy", headers, content)

    def _reset(self) -> None:
        _linger_zero(self.connection)


def _linger_zero(connection: socket.socket) -> None:
    """SO_LINGER 0: the close sends RST, the client's read fails at once."""
    try:
        connection.setsockopt(
            socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
        )
    except OSError:
        pass


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tests.chaos.proxy",
        description="Fault proxy on 127.0.0.1 in front of Azurite (one per target port).",
    )
    parser.add_argument(
        "--target-port",
        type=int,
        action="append",
        required=True,
        help="service port to forward to (repeat for blob, queue, table)",
    )
    parser.add_argument(
        "--port",
        type=int,
        action="append",
        default=[],
        help="listening port per target, in order (default: free ports)",
    )
    parser.add_argument("--busy", type=float, default=0.0, help="chance of 503 unforwarded")
    parser.add_argument(
        "--ambiguous",
        type=float,
        default=0.0,
        help="chance of forwarding, then dropping the connection unanswered",
    )
    parser.add_argument("--delayed", type=float, default=0.0, help="chance of a delay")
    parser.add_argument("--delay", default="0.3-1.5", help="delay range in seconds, LOW-HIGH")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--seconds", type=float, default=3600.0, help="stop after this long")
    parser.add_argument(
        "--outage-after",
        type=float,
        default=None,
        help="seconds after start when every proxy goes down",
    )
    parser.add_argument(
        "--outage-seconds",
        type=float,
        default=60.0,
        help="how long the outage lasts (it ends by itself)",
    )
    parser.add_argument("--outage-mode", choices=OUTAGE_MODES, default="refused")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    low, _, high = args.delay.partition("-")
    chances = FaultChances(
        args.busy, args.ambiguous, args.delayed, (float(low), float(high or low))
    )
    ports = args.port + [0] * (len(args.target_port) - len(args.port))
    proxies = [
        FaultProxy(target, chances, seed=args.seed + number, port=port).start()
        for number, (target, port) in enumerate(zip(args.target_port, ports, strict=False))
    ]
    for proxy in proxies:
        print(f"127.0.0.1:{proxy.port} -> 127.0.0.1:{proxy.target_port}", flush=True)
    if args.outage_after is not None:

        def go_down() -> None:
            for proxy in proxies:
                proxy.outage(args.outage_seconds, args.outage_mode)

        timer = threading.Timer(args.outage_after, go_down)
        timer.daemon = True
        timer.start()
    try:
        time.sleep(args.seconds)
    except KeyboardInterrupt:
        pass
    finally:
        for proxy in proxies:
            proxy.stop()
            print(json.dumps({"port": proxy.port, **proxy.counts.snapshot()}), flush=True)


if __name__ == "__main__":
    main()

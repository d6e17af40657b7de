"""A retrieval HTTP server speaking RAGEN's API, built on the standard library.

`POST /retrieve` with `{"query": str, "top_k": int}` answers `{"results": [{"id", "title", "content",
"score"}, ...]}`, best first; `GET /health` answers `{"status": "ok", "documents": N}`. Errors are JSON
`{"error": ...}` with status 400 (bad request), 404 (unknown path) or 413 (body too large). Requests are
served on threads (`ThreadingHTTPServer`). The server binds 127.0.0.1 by default; it has no authentication,
so bind other addresses only on a trusted network.

```bash
python -m trl_ragen2_envs.searchqa.server --port 8000                     # the procedural world, seed 0
python -m trl_ragen2_envs.searchqa.server --hotpotqa dev_distractor.json   # all paragraphs of a HotpotQA file
```

Point the environment at it with `SearchQAEnv(retriever_url="http://127.0.0.1:8000")`.
"""

from __future__ import annotations

import argparse
import json
import logging
import socket
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from .http_limits import MAX_JSON_DEPTH, content_length, decode_json
from .retrieval import BM25Retriever, hits_to_payload


logger = logging.getLogger(__name__)

MAX_BODY_BYTES = 1 << 20
MAX_TOP_K = 100
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
LISTEN_BACKLOG = 1024  # connections the kernel queues before accept (the kernel caps it at net.core.somaxconn)
MAX_LOG_CHARS = 300  # access-log lines are cut here, whatever the request line holds
DISCARD_TIMEOUT_S = 0.5  # how long a refused request's unread body is waited for before closing


@dataclass(frozen=True)
class ServerLimits:
    """What one client may cost the server.

    Args:
        max_body_bytes: Largest request body; a longer announced body gets 413 before anything is read.
        max_json_depth: Deepest JSON nesting accepted; deeper bodies get 400 before decoding.
        read_timeout_s: Longest wait for one read from a client; a stalled read ends the connection (408 when the
            request line has arrived).
        request_timeout_s: Longest life of one connection, however slowly its bytes trickle in; the socket is then
            shut down, which ends the handler thread.
        max_connections: Connections served at once; beyond it a connection gets 503 at once (clients retry).
    """

    max_body_bytes: int = MAX_BODY_BYTES
    max_json_depth: int = MAX_JSON_DEPTH
    read_timeout_s: float = 10.0
    request_timeout_s: float = 30.0
    max_connections: int = 256

    def __post_init__(self):
        for name in ("max_body_bytes", "max_json_depth", "max_connections"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"ServerLimits.{name} must be a positive integer, got {value!r}")
        for name in ("read_timeout_s", "request_timeout_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
                raise ValueError(f"ServerLimits.{name} must be a positive number of seconds, got {value!r}")


class BoundedHTTPServer(ThreadingHTTPServer):
    """`ThreadingHTTPServer` with a deep listen backlog, a cap on live connections and a deadline per connection.

    Each accepted socket is registered with its deadline; `service_actions`, which `serve_forever` runs between
    accepts and at least every `poll_interval`, shuts down the sockets past it, so no client holds a thread longer
    than `request_timeout_s` (plus one poll interval).
    """

    request_queue_size = LISTEN_BACKLOG
    daemon_threads = True

    def __init__(self, address, handler_class, limits: ServerLimits):
        self.limits = limits
        self._deadlines: dict[socket.socket, float] = {}
        self._deadlines_lock = threading.Lock()
        super().__init__(address, handler_class)

    def process_request(self, request, client_address):
        with self._deadlines_lock:
            busy = len(self._deadlines) >= self.limits.max_connections
            if not busy:
                self._deadlines[request] = time.monotonic() + self.limits.request_timeout_s
        if busy:
            _refuse_busy(request)
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def shutdown_request(self, request):
        with self._deadlines_lock:
            self._deadlines.pop(request, None)
        super().shutdown_request(request)

    def service_actions(self):
        now = time.monotonic()
        with self._deadlines_lock:
            expired = [request for request, deadline in self._deadlines.items() if deadline <= now]
        for request in expired:
            _hang_up(request)

    def close_connections(self) -> None:
        """Shut down every open connection (their handler threads then end)."""
        with self._deadlines_lock:
            requests = list(self._deadlines)
        for request in requests:
            _hang_up(request)

    @property
    def open_connections(self) -> int:
        """Connections accepted and not yet closed."""
        with self._deadlines_lock:
            return len(self._deadlines)

    def handle_error(self, request, client_address):  # the default prints a traceback to stderr
        logger.debug("retrieval server: error while serving %s", client_address, exc_info=True)


def _hang_up(request: socket.socket) -> None:
    try:
        request.shutdown(socket.SHUT_RDWR)  # a blocked read returns at once; the handler then finishes
    except OSError:
        pass  # already closed


def _refuse_busy(request: socket.socket) -> None:
    """Answer 503 on a connection the server has no room for, without blocking the accept loop."""
    body = b'{"error": "the retrieval server is at its connection limit; retry shortly"}'
    head = (
        "HTTP/1.0 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    try:
        request.setblocking(False)
        try:
            request.recv(1 << 16)  # what already arrived: closing with unread data would reset, hiding the 503
        except (BlockingIOError, OSError):
            pass
        request.send(head.encode() + body)
    except OSError:
        pass


def _handler_class(retriever, default_top_k: int, limits: ServerLimits) -> type[BaseHTTPRequestHandler]:
    class RetrievalHandler(BaseHTTPRequestHandler):
        server_version = "trl-ragen2-retrieval/1"
        timeout = limits.read_timeout_s  # StreamRequestHandler applies it to every read of the socket

        def _send_json(self, status: int, payload: dict) -> None:
            body = json.dumps(payload).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except OSError:  # the client left, or its deadline shut the socket
                self.close_connection = True

        def do_GET(self) -> None:  # http.server dispatches on the method name
            if self.path.rstrip("/") == "/health":
                self._send_json(200, {"status": "ok", "documents": len(retriever)})
            else:
                self._send_json(404, {"error": f"unknown path {self.path[:100]!r}; use POST /retrieve or GET /health"})

        def do_POST(self) -> None:
            self.body_read = False
            try:
                status, payload = self._retrieve()
            except Exception:  # noqa: BLE001 -- a request must get an answer, never a dropped connection
                logger.exception("retrieval server: the search failed")
                status, payload = 500, {"error": "the search failed on the server; see its log"}
            self._send_json(status, payload)
            if not self.body_read:
                self._discard_input()

        def _discard_input(self) -> None:
            """Close the sending side, then read (and drop) what the client still sends, briefly and bounded:
            closing with unread input would reset the connection before the client reads the answer."""
            try:
                self.connection.shutdown(socket.SHUT_WR)
                self.connection.settimeout(DISCARD_TIMEOUT_S)
                for _ in range(limits.max_body_bytes // (1 << 16) + 1):
                    if not self.connection.recv(1 << 16):
                        break
            except OSError:
                pass

        def _retrieve(self) -> tuple[int, dict]:
            if self.path.rstrip("/") != "/retrieve":
                return 404, {"error": f"unknown path {self.path[:100]!r}; use POST /retrieve"}
            self.close_connection = True  # the body may be left unread below: never reuse the connection
            if "Transfer-Encoding" in self.headers:
                return 400, {"error": "Transfer-Encoding is not accepted; send the body with a Content-Length"}
            length = content_length(self.headers.get_all("Content-Length"))
            if isinstance(length, str):
                return 400, {"error": length}
            if length > limits.max_body_bytes:
                return 413, {"error": f"body of {length} bytes exceeds {limits.max_body_bytes}"}
            try:
                body = self.rfile.read(length)
                self.body_read = True
            except TimeoutError:
                return 408, {"error": f"the body did not arrive within {limits.read_timeout_s} s"}
            if len(body) < length:
                return 400, {"error": f"the body ended after {len(body)} of {length} bytes"}
            request, error = decode_json(body or b"null", limits.max_json_depth)
            if error is not None:
                return 400, {"error": error}
            if not isinstance(request, dict) or not isinstance(request.get("query"), str):
                return 400, {"error": 'expected {"query": str, "top_k": int}'}
            top_k = request.get("top_k", default_top_k)
            if not isinstance(top_k, int) or isinstance(top_k, bool) or not 1 <= top_k <= MAX_TOP_K:
                return 400, {"error": f"top_k must be an integer in [1, {MAX_TOP_K}], got {str(top_k)[:40]}"}
            return 200, hits_to_payload(retriever.search(request["query"], top_k))

        def log_message(self, format: str, *args) -> None:  # route access logs to logging, cut to a bounded line
            logger.debug("%s - %s", self.address_string(), ascii(format % args)[:MAX_LOG_CHARS])

    return RetrievalHandler


class RetrievalServer:
    """Serve `retriever` over HTTP. `port=0` picks a free port; `url` tells which.

    Use as a context manager to run it on a background thread:

    ```python
    with RetrievalServer(BM25Retriever(passages)) as server:
        env = SearchQAEnv(retriever_url=server.url)
    ```

    Args:
        retriever: Anything with `search(query, top_k) -> list[SearchHit]` and `len()`.
        host, port: The address to bind (default: loopback, any free port).
        default_top_k: Results per query when the request has no `top_k`.
        limits: What one client may cost the server ([`ServerLimits`]).
    """

    def __init__(
        self,
        retriever,
        host: str = "127.0.0.1",
        port: int = 0,
        default_top_k: int = 3,
        limits: ServerLimits | None = None,
    ):
        if host not in LOOPBACK_HOSTS:
            logger.warning("The retrieval server has no authentication and is bound to %s, not loopback.", host)
        self.limits = limits or ServerLimits()
        handler = _handler_class(retriever, default_top_k, self.limits)
        self.httpd = BoundedHTTPServer((host, port), handler, self.limits)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The base URL of the bound address, e.g. `http://127.0.0.1:8000` (IPv6 hosts in brackets)."""
        host, port = self.httpd.server_address[:2]
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{port}"

    def start(self) -> RetrievalServer:
        """Serve on a daemon thread; returns the server."""
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="retrieval-server", daemon=True)
        self._thread.start()
        return self

    def shutdown(self) -> None:
        """Stop serving, close every open connection, wait for the handler threads and close the socket."""
        if self._thread is not None:
            self.httpd.shutdown()
            self._thread.join()
            self._thread = None
        self.httpd.close_connections()
        self.httpd.server_close()  # joins the handler threads

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.shutdown()


def main(argv: list[str] | None = None) -> None:
    """Command line: serve the procedural world or a HotpotQA file's paragraphs until interrupted."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    parser.add_argument("--port", type=int, default=8000, help="port to bind (0: any free port)")
    parser.add_argument("--top-k", type=int, default=3, help="results per query when the request has no top_k")
    parser.add_argument("--world-seed", type=int, default=0, help="seed of the procedural world to serve")
    parser.add_argument("--world-scale", type=float, default=1.0, help="size multiplier of the procedural world")
    parser.add_argument("--hotpotqa", default=None, help="serve all paragraphs of this HotpotQA file instead")
    args = parser.parse_args(argv)

    if args.hotpotqa:
        from .hotpotqa import global_passages, load_hotpotqa

        passages = global_passages(load_hotpotqa(args.hotpotqa))
    else:
        from .world import build_world

        passages = build_world(args.world_seed, args.world_scale).passages
    server = RetrievalServer(BM25Retriever(passages), args.host, args.port, args.top_k)
    logging.basicConfig(level=logging.INFO)
    logger.info("Serving %d passages at %s/retrieve", len(passages), server.url)
    try:
        server.httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.httpd.close_connections()
        server.httpd.server_close()


if __name__ == "__main__":
    main()

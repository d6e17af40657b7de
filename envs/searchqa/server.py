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
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from .retrieval import BM25Retriever, hits_to_payload


logger = logging.getLogger(__name__)

MAX_BODY_BYTES = 1 << 20
MAX_TOP_K = 100
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


def _handler_class(retriever, default_top_k: int) -> type[BaseHTTPRequestHandler]:
    class RetrievalHandler(BaseHTTPRequestHandler):
        server_version = "trl-ragen2-retrieval/1"

        def _send_json(self, status: int, payload: dict) -> None:
            body = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # http.server dispatches on the method name
            if self.path.rstrip("/") == "/health":
                self._send_json(200, {"status": "ok", "documents": len(retriever)})
            else:
                self._send_json(404, {"error": f"unknown path {self.path!r}; use POST /retrieve or GET /health"})

        def do_POST(self) -> None:
            if self.path.rstrip("/") != "/retrieve":
                self._send_json(404, {"error": f"unknown path {self.path!r}; use POST /retrieve"})
                return
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY_BYTES:
                self._send_json(413, {"error": f"body of {length} bytes exceeds {MAX_BODY_BYTES}"})
                return
            try:
                request = json.loads(self.rfile.read(length) or b"null")
            except (json.JSONDecodeError, UnicodeDecodeError) as error:
                self._send_json(400, {"error": f"body is not JSON: {error}"})
                return
            if not isinstance(request, dict) or not isinstance(request.get("query"), str):
                self._send_json(400, {"error": 'expected {"query": str, "top_k": int}'})
                return
            top_k = request.get("top_k", default_top_k)
            if not isinstance(top_k, int) or isinstance(top_k, bool) or not 1 <= top_k <= MAX_TOP_K:
                self._send_json(400, {"error": f"top_k must be an integer in [1, {MAX_TOP_K}], got {top_k!r}"})
                return
            self._send_json(200, hits_to_payload(retriever.search(request["query"], top_k)))

        def log_message(self, format: str, *args) -> None:  # route access logs to logging, not stderr
            logger.debug("%s - %s", self.address_string(), format % args)

    return RetrievalHandler


class RetrievalServer:
    """Serve `retriever` over HTTP. `port=0` picks a free port; `url` tells which.

    Use as a context manager to run it on a background thread:

    ```python
    with RetrievalServer(BM25Retriever(passages)) as server:
        env = SearchQAEnv(retriever_url=server.url)
    ```
    """

    def __init__(self, retriever, host: str = "127.0.0.1", port: int = 0, default_top_k: int = 3):
        if host not in LOOPBACK_HOSTS:
            logger.warning("The retrieval server has no authentication and is bound to %s, not loopback.", host)
        self.httpd = ThreadingHTTPServer((host, port), _handler_class(retriever, default_top_k))
        self.httpd.daemon_threads = True
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
        """Stop the serving thread, if any, and close the socket."""
        if self._thread is not None:
            self.httpd.shutdown()
            self._thread.join()
            self._thread = None
        self.httpd.server_close()

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
        server.httpd.server_close()


if __name__ == "__main__":
    main()

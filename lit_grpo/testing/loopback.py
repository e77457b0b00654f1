"""A scripted OpenAI-compatible ``/chat/completions`` server on loopback, for tests, benchmarks and dry runs.

A script maps each request to a :class:`Reply` (content, status, headers, delay, a dropped connection,
a cut reply), so tests exercise the real HTTP client against real sockets. Requests are recorded with
their headers and arrival times. Standard library only (``http.server``), one thread per connection.

    with LoopbackJudgeServer(lambda body, n: Reply(content='{"correctness": 2}')) as server:
        judge = OpenAIJudge(JudgeConfig(base_url=server.base_url))
"""

from __future__ import annotations

import dataclasses
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable


@dataclasses.dataclass
class Reply:
    """What the server does with one request."""

    content: str | None = None
    """Assistant message content (``None`` with status 200 sends ``null``)."""
    status: int = 200
    headers: dict[str, str] = dataclasses.field(default_factory=dict)
    delay_s: float = 0.0
    """Seconds to wait before answering (longer than the client's timeout = a timeout)."""
    drop: bool = False
    """Close the connection without any response."""
    finish_reason: str = "stop"
    raw_body: str | bytes | None = None
    """Send this body verbatim instead of a chat-completions JSON (bytes as they are: e.g. gzip data, with
    ``headers={"Content-Encoding": "gzip"}``)."""
    message: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Further fields of the reply's message (``reasoning``, ``reasoning_content`` as vLLM's reasoning parsers send)."""
    tokens: int = 30


@dataclasses.dataclass
class Seen:
    """A request as the server saw it."""

    body: dict[str, Any]
    headers: dict[str, str]
    time: float


class _Server(ThreadingHTTPServer):
    request_queue_size = 1024  # the default backlog of 5 drops bursts of connections
    daemon_threads = True

    def handle_error(self, request, client_address):
        """A client that hangs up (a timeout, a body it refused to read on) is routine here; anything else is printed."""
        import sys

        if not isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            super().handle_error(request, client_address)


Script = Callable[[dict[str, Any], int], Reply]


def votes_by_seed(votes: list[dict[str, int]], delay_s: float = 0.0) -> Script:
    """A script whose juror with ``seed = k`` answers ``votes[k % len(votes)]`` as JSON."""
    return lambda body, n: Reply(content=json.dumps(votes[int(body.get("seed") or 0) % len(votes)]), delay_s=delay_s)


class LoopbackJudgeServer:
    """``with LoopbackJudgeServer(script) as s: s.base_url``; ``s.requests`` lists what arrived, in order."""

    def __init__(self, script: Script | None = None, host: str = "127.0.0.1"):
        self.script = script or votes_by_seed([{"correctness": 2, "principle": 1, "unit": 1, "reasoning": 2}])
        self.requests: list[Seen] = []
        self.in_flight = self.max_in_flight = 0
        """Requests being answered now, and the most at once so far."""
        self._lock = threading.Lock()
        self._server = _Server((host, 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="loopback-judge", daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> "LoopbackJudgeServer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # else headers and body, sent apart, wait on delayed ACKs (~40 ms)

            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                with server._lock:
                    n = len(server.requests)
                    server.requests.append(Seen(body, dict(self.headers), time.monotonic()))
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    self._answer(server.script(body, n), body, n)
                finally:
                    with server._lock:
                        server.in_flight -= 1

            def _answer(self, reply: Reply, body: dict[str, Any], n: int) -> None:
                if reply.delay_s:
                    time.sleep(reply.delay_s)
                if reply.drop:
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                payload = (reply.raw_body if reply.raw_body is not None else json.dumps({
                    "id": f"cmpl-{n}", "object": "chat.completion", "model": body.get("model"),
                    "choices": [{"index": 0, "finish_reason": reply.finish_reason,
                                 "message": {"role": "assistant", "content": reply.content, **reply.message}}],
                    "usage": {"prompt_tokens": reply.tokens - 10, "completion_tokens": 10,
                              "total_tokens": reply.tokens},
                }))
                payload = payload.encode() if isinstance(payload, str) else payload
                try:
                    self.send_response(reply.status)
                    for k, v in {"Content-Type": "application/json", **reply.headers}.items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout)
                    self.close_connection = True

        return Handler

"""A STUB OpenAI-compatible chat server on 127.0.0.1, for client-side measurements and tests. It runs no model.

Every POST /v1/chat/completions waits `delay` seconds (a latency-bound endpoint) and answers each output field
the request asks for with an empty value: JSON when a response_format is sent, DSPy's [[ ## field ## ]] text
otherwise. GET /v1/models lists `served` (the model ids it says it serves). It keeps every request body and header
it got, and refuses requests beyond `max_requests` (HTTP 429), so a runaway client stays bounded.

    with StubServer(delay=0.2) as stub:
        stub.api_base  # http://127.0.0.1:<port>/v1

From a shell, `python experiments/stub_server.py --port 8000` serves until Ctrl-C and prints what to pass tide.
"""

from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def _requested_fields(messages: list[dict]) -> list[str]:
    last = (messages[-1].get("content") or "") if messages else ""
    tail = last.split("Respond with")[-1]
    fields = re.findall(r"\[\[ ## (\w+) ## \]\]", tail) or re.findall(r"`(\w+)`", tail)
    return [f for f in dict.fromkeys(fields) if f != "completed"]


def empty_answer(body: dict) -> str:
    """Each requested output field, empty: lists for the round signatures' `findings`, "" otherwise."""
    fields = _requested_fields(body.get("messages") or [])
    values = {f: ([] if f == "findings" else "") for f in fields}
    if body.get("response_format"):
        return json.dumps(values)
    parts = [f"[[ ## {f} ## ]]\n{json.dumps(v) if isinstance(v, list) else v}" for f, v in values.items()]
    return "\n\n".join([*parts, "[[ ## completed ## ]]"])


class StubServer:
    def __init__(self, delay: float = 0.0, max_requests: int = 10_000, answer=empty_answer, status: int = 200,
                 error_body: str = "", served: tuple[str, ...] = ("stub-model",), host: str = "127.0.0.1",
                 port: int = 0):
        self.address = (host, port)  # port 0: any free port
        self.delay, self.max_requests, self.answer, self.served = delay, max_requests, answer, served
        self.status, self.error_body = status, error_body
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        self.lock = threading.Lock()
        self.in_flight = self.most_in_flight = 0
        self._server: ThreadingHTTPServer | None = None

    @property
    def api_base(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> StubServer:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_GET(self):  # noqa: N802 - http.server's naming
                if self.path.rstrip("/").endswith("/models"):
                    return self._send(
                        200, {"object": "list", "data": [{"id": m, "object": "model"} for m in stub.served]}
                    )
                self._send(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self):  # noqa: N802 - http.server's naming
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                with stub.lock:
                    n = len(stub.requests)
                    stub.requests.append(body)
                    stub.headers.append(dict(self.headers))
                    stub.in_flight += 1
                    stub.most_in_flight = max(stub.most_in_flight, stub.in_flight)
                try:
                    if n >= stub.max_requests:
                        return self._send(429, {"error": {"message": f"stub: more than {stub.max_requests} requests"}})
                    time.sleep(stub.delay)
                    if stub.status != 200:
                        return self._send(stub.status, {"error": {"message": stub.error_body}})
                    self._send(200, {
                        "id": f"stub-{n}", "object": "chat.completion", "model": body.get("model", "stub"),
                        "choices": [{"index": 0, "finish_reason": "stop",
                                     "message": {"role": "assistant", "content": stub.answer(body)}}],
                        "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
                    })
                finally:
                    with stub.lock:
                        stub.in_flight -= 1

            def _send(self, status: int, data: dict):
                raw = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self._server = ThreadingHTTPServer(self.address, Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="stub-openai", daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python experiments/stub_server.py",
                                     description="Serve a stub OpenAI-compatible chat server (no model: every answer "
                                                 "is empty) until Ctrl-C.")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000; 0: any free one)")
    args = parser.parse_args(argv)
    try:
        stub = StubServer(host=args.host, port=args.port).__enter__()
    except OSError as exc:
        parser.error(f"cannot listen on {args.host}:{args.port} ({exc.strerror or exc}); pass another --port")
    try:
        print(f"stub OpenAI-compatible server on {stub.api_base}: no model, every answer is empty\n"
              f"  --backbone openai-compatible --api-base {stub.api_base} (or TIDE_API_BASE={stub.api_base})\n"
              f"  key variable: TIDE_API_KEY (this stub needs none); model: {', '.join(stub.served)} (from "
              "GET /v1/models; TIDE_SERVED_MODEL picks one when a server lists several)\n"
              f"  e.g. tide discover repo examples/sample_repo --backbone openai-compatible --api-base {stub.api_base} "
              "--templates programs/repository/local/templates.json\nCtrl-C stops it.", flush=True)
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        stub.__exit__(None, None, None)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""A counting HTTP proxy in front of the local DynamoDB-compatible server.

Both systems talk to the server through it, so one counter sees every request either makes:
requests are counted by their `X-Amz-Target` operation (`PutItem`, `GetItem`, ...). It also
injects a store outage on demand (every DynamoDB request answered `500 InternalServerError`,
which both SDKs treat as retryable).

Usage: python proxy.py UPSTREAM_URL PORT_FILE
Control (not forwarded, not counted):
  GET  /__peer/counts          -> {"PutItem": 3, ...}  (totals since start)
  POST /__peer/outage?on=1|0   -> switches the outage on or off
"""

import http.client
import http.server
import json
import os
import socket
import sys
import threading
import urllib.parse

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection"}


class State:
    def __init__(self, upstream: str):
        parsed = urllib.parse.urlsplit(upstream)
        self.host, self.port = parsed.hostname, parsed.port or 80
        self.lock = threading.Lock()
        self.counts: dict[str, int] = {}
        self.outage = False
        self.local = threading.local()

    def count(self, operation: str) -> None:
        with self.lock:
            self.counts[operation] = self.counts.get(operation, 0) + 1

    def upstream(self) -> http.client.HTTPConnection:
        conn = getattr(self.local, "conn", None)
        if conn is None:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
            conn.connect()
            conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.local.conn = conn
        return conn


def make_handler(state: State):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Without it, Nagle's algorithm and delayed ACKs add ~40 ms to every request.
        disable_nagle_algorithm = True

        def log_message(self, *args):  # one line per request would cost more than the request
            pass

        def _reply(self, status: int, body: bytes, headers: dict[str, str]) -> None:
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self._headers_buffer.append(b"\r\n")
            self._headers_buffer.append(body)  # headers and body in one write
            self.flush_headers()

        def _control(self) -> bool:
            if not self.path.startswith("/__peer/"):
                return False
            url = urllib.parse.urlsplit(self.path)
            if url.path == "/__peer/counts":
                with state.lock:
                    body = json.dumps(state.counts).encode()
            elif url.path == "/__peer/outage":
                state.outage = urllib.parse.parse_qs(url.query).get("on", ["1"])[0] == "1"
                body = json.dumps({"outage": state.outage}).encode()
            else:
                self._reply(404, b"{}", {"Content-Type": "application/json"})
                return True
            self._reply(200, body, {"Content-Type": "application/json"})
            return True

        def _forward(self) -> None:
            if self._control():
                return
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            target = self.headers.get("X-Amz-Target", "")
            operation = target.rsplit(".", 1)[-1] if target else f"{self.command} {self.path}"
            state.count(operation)
            if state.outage and target:
                error = {"__type": "com.amazonaws.dynamodb.v20120810#InternalServerError",
                         "message": "injected store outage"}
                self._reply(500, json.dumps(error).encode(), {"Content-Type": "application/x-amz-json-1.0"})
                return
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
            for attempt in (1, 2):
                conn = state.upstream()
                try:
                    conn.request(self.command, self.path, body=body, headers=headers)
                    response = conn.getresponse()
                    data = response.read()
                    break
                except (http.client.HTTPException, OSError):
                    conn.close()
                    state.local.conn = None
                    if attempt == 2:
                        raise
            out = {k: v for k, v in response.getheaders() if k.lower() not in HOP_BY_HOP | {"content-length"}}
            self._reply(response.status, data, out)

        do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _forward

    return Handler


def main() -> None:
    upstream, port_file = sys.argv[1], sys.argv[2]
    state = State(upstream)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), make_handler(state))
    server.daemon_threads = True
    with open(port_file + ".tmp", "w") as f:
        f.write(f"{server.server_address[1]}\n")
    os.replace(port_file + ".tmp", port_file)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()

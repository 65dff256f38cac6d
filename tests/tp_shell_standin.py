"""STAND-IN for `trace_processor_shell -D --http-port PORT` (no native binary can be fetched here).

It speaks the shell's HTTP RPC endpoints that the `perfetto` Python package uses (GET /status,
POST /parse, GET /notify_eof, POST /query), backed by the real trace_processor compiled to wasm
(abtest.trace.wasm_engine). So the test exercises the package's real launch/HTTP/proto path
(TraceProcessorConfig(bin_path=...)) end to end; only the process hosting trace_processor differs.
"""

from __future__ import annotations

import argparse
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

from abtest.trace.wasm_engine import WasmEngineError, WasmTraceProcessor


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("-D", action="store_true")
    ap.add_argument("--http-port", type=int, required=True)
    ap.add_argument("--no-ftrace-raw", action="store_true")
    args, _ = ap.parse_known_args(argv)
    tp = WasmTraceProcessor()
    protos = tp.protos
    state = {"offset": 0}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):  # quiet
            pass

        def _reply(self, body: bytes, code: int = 200) -> None:
            self.send_response(code)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _body(self) -> bytes:
            return self.rfile.read(int(self.headers.get("Content-Length", 0)))

        def do_GET(self):
            if self.path == "/status":
                st = protos.StatusResult()
                st.human_readable_version = "abtest tp_shell_standin (wasm v52)"
                self._reply(st.SerializeToString())
            elif self.path == "/notify_eof":
                tp.finalize()
                self._reply(b"")
            else:
                self._reply(b"", 404)

        def do_POST(self):
            if self.path == "/parse":
                chunk = self._body()
                res = protos.AppendTraceDataResult()
                try:
                    tp.append(chunk, offset=state["offset"])
                except WasmEngineError as e:
                    res.error = str(e)
                state["offset"] += len(chunk)
                res.total_bytes_parsed = state["offset"]
                self._reply(res.SerializeToString())
            elif self.path == "/query":
                q = protos.QueryArgs()
                q.ParseFromString(self._body())
                try:
                    res = tp.query_raw(q.sql_query)
                except WasmEngineError as e:
                    res = protos.QueryResult()
                    res.error = str(e)
                self._reply(res.SerializeToString())
            else:
                self._reply(b"", 404)

    server = HTTPServer(("localhost", args.http_port), Handler)  # one request at a time: the engine is not thread-safe
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

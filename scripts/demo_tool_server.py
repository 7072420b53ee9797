#!/usr/bin/env python3
# A tiny loopback tool server for scripts/demo.sh: agentq's worker POSTs
# {"job_id","call_id","name","arguments"} (Standard Webhooks-signed) and gets {"output": ...}.
# Usage: demo_tool_server.py PORT_FILE   (binds 127.0.0.1 on a free port, writes the port)
import json
import sys
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

FORECASTS = {"paris": "sunny, 21 C", "london": "light rain, 14 C", "tokyo": "cloudy, 18 C"}


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        try:
            req = json.loads(body)
        except ValueError:
            self.send_error(400)
            return
        args = req.get("arguments") or {}
        city = str(args.get("city", "") if isinstance(args, dict) else "").strip().lower()
        forecast = FORECASTS.get(city, "clear skies, 19 C")
        out = {"output": json.dumps({"city": city or "unknown", "forecast": forecast,
                                     "at": time.strftime("%H:%M:%S")})}
        sys.stderr.write("tool server: %s(%s) signed=%s -> %s\n" % (
            req.get("name"), json.dumps(args), "webhook-signature" in self.headers, out["output"]))
        data = json.dumps(out).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *a):
        pass


def main():
    srv = HTTPServer(("127.0.0.1", 0), Handler)
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write(str(srv.server_address[1]))
    import os
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
    srv.serve_forever()


if __name__ == "__main__":
    main()

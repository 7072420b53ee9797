#!/usr/bin/env python3
"""Time to first token of POST /v1/chat/completions (stream: true) on an agentqd: idle, and under
background load (background responses whose server-side HTTP tool takes --tool-s seconds, so they
hold the workers' job slots and back up the queue), against a same-run baseline: a normal-priority
streamed background response under the same load. Prints medians and the ratios
(scripts/bench/openai_ttft.sh starts agentqd on the tiny model and runs this)."""
import argparse, http.client, http.server, json, statistics, threading, time, urllib.parse


def post(url, key, path, body):
    u = urllib.parse.urlparse(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=300)
    c.request("POST", path, json.dumps(body), {"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    return c, c.getresponse()


def ttft(url, key, path, body, is_chat):
    """Seconds from sending the request to the first streamed text."""
    t0 = time.perf_counter()
    c, r = post(url, key, path, body)
    assert r.status == 200, (r.status, r.read()[:300])
    first = None
    for raw in r:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        d = json.loads(line[6:])
        text = (d["choices"][0]["delta"].get("content") if d.get("choices") else None) if is_chat else (
            d.get("delta") if d.get("type") == "response.output_text.delta" else None)
        if text:
            first = time.perf_counter() - t0
            break
    c.close()
    return first


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--n", type=int, default=15, help="measurements per series")
    ap.add_argument("--background", type=int, default=200, help="background responses submitted before measuring")
    ap.add_argument("--tool-s", type=float, default=3.0, help="seconds the background responses' tool takes")
    a = ap.parse_args()

    class slow_tool(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("content-length", 0)))
            time.sleep(a.tool_s)
            body = b'{"output":"done"}'
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    tool = http.server.ThreadingHTTPServer(("127.0.0.1", 0), slow_tool)
    threading.Thread(target=tool.serve_forever, daemon=True).start()
    tool_def = {"type": "function", "name": "wait",  # an enum keeps the tiny model's call short
                "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Oslo"]}},
                               "required": ["city"], "additionalProperties": False},
                "execution": {"type": "http", "url": f"http://127.0.0.1:{tool.server_address[1]}/", "timeout_ms": 60000}}
    chat = {"model": a.model, "messages": [{"role": "user", "content": "Once upon a time"}], "max_tokens": 8,
            "stream": True}
    normal = {"model": a.model, "input": "Once upon a time", "max_output_tokens": 8, "stream": True, "background": True}

    idle = [ttft(a.url, a.key, "/v1/chat/completions", chat, True) for _ in range(a.n)]

    # NOTE: a fixed backlog submitted up front; past --max-jobs it waits in the queue, where priority decides
    for _ in range(a.background):
        c, r = post(a.url, a.key, "/v1/responses", {"model": a.model, "input": "Once upon a time", "background": True,
                                                  "tools": [tool_def], "tool_choice": "required", "max_tool_calls": 1,
                                                  "max_output_tokens": 200})
        body = r.read()
        assert r.status == 200, (r.status, body[:300])
        c.close()
    time.sleep(0.5)

    def n_status(st):  # jobs in a state now (at most 100), to show the backlog the numbers were taken under
        u = urllib.parse.urlparse(a.url)
        c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
        c.request("GET", f"/v1/jobs?status={st}&limit=100", headers={"Authorization": f"Bearer {a.key}"})
        n = len(json.loads(c.getresponse().read())["data"])
        c.close()
        return n
    backlog = {"queued": n_status("queued"), "running": n_status("running")}
    loaded, base = [], []
    for _ in range(a.n):
        loaded.append(ttft(a.url, a.key, "/v1/chat/completions", chat, True))
        base.append(ttft(a.url, a.key, "/v1/responses", normal, False))
    m = {k: statistics.median([x for x in v if x is not None]) * 1000 for k, v in
         {"chat_idle": idle, "chat_loaded": loaded, "normal_loaded": base}.items()}
    backlog_after = {"queued": n_status("queued"), "running": n_status("running")}
    print(json.dumps({"ttft_ms_median": m, "n": a.n, "background": a.background, "jobs_before": backlog,
                      "jobs_after": backlog_after,
                      "ratio_normal_over_chat_loaded": m["normal_loaded"] / m["chat_loaded"],
                      "ratio_chat_loaded_over_idle": m["chat_loaded"] / m["chat_idle"]}, indent=1))


if __name__ == "__main__":
    main()

// Node side of scripts/bench/queue.sh (issue 29); prints one JSON line.
//   node queue_node.mjs submit --url URL --key KEY --model M --rate R --seconds S [--warmup-s W] [--trace F]
//     open-loop POST /v1/jobs at R requests/s (keep-alive, up to 256 connections): submit latency
//     percentiles. Node rather than loadgen.py: Python threads do not hold 1,000 requests/s here.
//     --warmup-s W: the first W seconds of the same schedule (a cold client: connections opened,
//     its JIT) are reported apart (warmup_p99_ms), the percentiles are of the S seconds after.
//   node queue_node.mjs bullmq --bullmq-dir D --redis-port P --jobs N [--concurrency C] [--producers K]
//     the baseline: BullMQ (installed by queue.sh into its temp dir D with npm) on its own
//     redis-server. add_per_s: N no-op jobs added one Queue.add per job by K concurrent producers, no
//     worker running; jobs_per_s: N more added the same way while a Worker (its own process,
//     concurrency C) runs them, first add to last completion.
import http from "node:http";
import { fork } from "node:child_process";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

function args() {
  const out = {};
  const a = process.argv.slice(3);
  for (let i = 0; i < a.length; i += 2) out[a[i].replace(/^--/, "")] = a[i + 1];
  return out;
}

function pct(xs, p) {
  const s = [...xs].sort((x, y) => x - y);
  return s[Math.min(s.length - 1, Math.floor(p * s.length))];
}

async function submit(a) {
  const u = new URL(a.url);
  const rate = Number(a.rate || 1000), seconds = Number(a.seconds || 5);
  const agent = new http.Agent({ keepAlive: true, maxSockets: 256 });
  const n_warm = Math.round(rate * Number(a["warmup-s"] || 0));
  const n = n_warm + Math.round(rate * seconds);
  const lat = [], warm = [];
  const trace = [];  // --trace FILE: [index, answered at ms since the start, latency ms] per answer
  let errors = 0, firstError = "";
  const one = (i) =>
    new Promise((resolve) => {
      const body = JSON.stringify({ model: a.model, messages: [{ role: "user", content: `Once upon a time s${i}` }],
                                    max_turns: 1, max_tokens_per_turn: 1 });
      const t0 = process.hrtime.bigint();
      const req = http.request({ host: u.hostname, port: u.port, path: "/v1/jobs", method: "POST", agent,
                                 headers: { authorization: `Bearer ${a.key}`, "content-type": "application/json",
                                            "content-length": Buffer.byteLength(body) } }, (res) => {
        res.resume();
        res.on("end", () => {
          if (res.statusCode === 202 || res.statusCode === 200) {
            const ms = Number(process.hrtime.bigint() - t0) / 1e6;
            (i < n_warm ? warm : lat).push(ms);
            if (a.trace) trace.push([i, +(performance.now() - start).toFixed(2), +ms.toFixed(2)]);
          }
          else if (errors++ === 0) firstError = String(res.statusCode);
          resolve();
        });
      });
      req.on("error", (e) => { if (errors++ === 0) firstError = e.message; resolve(); });
      req.end(body);
    });
  const pending = [];
  const start = performance.now();
  let lateMax = 0;  // how far behind schedule the generator itself fell (ms)
  for (let i = 0; i < n; i++) {
    const due = start + (i * 1000) / rate;
    const wait = due - performance.now();
    if (wait > 1) await new Promise((r) => setTimeout(r, wait));
    lateMax = Math.max(lateMax, performance.now() - due);
    pending.push(one(i));
  }
  await Promise.all(pending);
  const wall = (performance.now() - start) / 1000;
  agent.destroy();
  if (a.trace) (await import("node:fs")).writeFileSync(a.trace, JSON.stringify(trace));
  const out = { rate_per_s: rate, requests: n - n_warm, ok: lat.length, errors, first_error: firstError,
    achieved_per_s: Math.round(n / wall), generator_late_max_ms: Math.round(lateMax),
    p50_ms: +pct(lat, 0.5).toFixed(2), p90_ms: +pct(lat, 0.9).toFixed(2), p99_ms: +pct(lat, 0.99).toFixed(2),
    max_ms: +Math.max(...lat).toFixed(2) };
  if (n_warm > 0) Object.assign(out, { warmup_requests: n_warm, warmup_p50_ms: +pct(warm, 0.5).toFixed(2),
                                       warmup_p99_ms: +pct(warm, 0.99).toFixed(2) });
  console.log(JSON.stringify(out));
}

async function produce(queue, n, producers, tag) {
  let next = 0;
  const worker = async () => {
    while (next < n) {
      const i = next++;
      await queue.add("noop", { i, tag }, { removeOnComplete: true, removeOnFail: true });
    }
  };
  await Promise.all(Array.from({ length: producers }, worker));
}

async function bullmq(a) {
  // NOTE: installed apart from the repository (queue.sh's temp dir): resolved from --bullmq-dir.
  const { Queue, Worker } = createRequire(path.join(a["bullmq-dir"], "package.json"))("bullmq");
  const connection = { host: "127.0.0.1", port: Number(a["redis-port"]) };
  const n = Number(a.jobs || 20000), producers = Number(a.producers || 16);
  const concurrency = Number(a.concurrency || 64);
  if (a.role === "worker") {
    let done = 0;
    const w = new Worker("bench", async () => {}, { connection, concurrency });
    w.on("completed", () => {
      if (++done === n) process.send({ done: Date.now() });
    });
    process.send({ ready: true });
    return;
  }
  const queue = new Queue("bench", { connection });
  await queue.waitUntilReady();
  // 1. adds alone (no worker): the one-job-per-call add rate
  let t0 = performance.now();
  await produce(queue, n, producers, "add");
  const addS = (performance.now() - t0) / 1000;
  await queue.obliterate({ force: true });
  // 2. end to end: the same adds with a worker process running them
  const child = fork(fileURLToPath(import.meta.url), ["bullmq", ...process.argv.slice(3), "--role", "worker"]);
  await new Promise((r) => child.on("message", (m) => m.ready && r()));
  const finished = new Promise((r) => child.on("message", (m) => m.done && r(m.done)));
  const startMs = Date.now();
  await produce(queue, n, producers, "e2e");
  const addedMs = Date.now();
  const doneMs = await finished;
  child.kill();
  await queue.close();
  console.log(JSON.stringify({ bullmq_jobs: n, producers, worker_concurrency: concurrency,
    add_s: +addS.toFixed(3), add_per_s: Math.round(n / addS),
    e2e_s: +((doneMs - startMs) / 1000).toFixed(3), jobs_per_s: Math.round(n / ((doneMs - startMs) / 1000)),
    e2e_add_per_s: Math.round(n / ((addedMs - startMs) / 1000)) }));
  process.exit(0);
}

const cmd = process.argv[2];
const a = args();
if (cmd === "submit") await submit(a);
else if (cmd === "bullmq") await bullmq(a);
else {
  console.error("usage: queue_node.mjs submit|bullmq ...");
  process.exit(2);
}

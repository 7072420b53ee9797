// Node side of scripts/bench/queue.sh (issue 29); prints one JSON line.
//   node queue_node.mjs submit --url URL --key KEY --model M --rate R --seconds S [--warmup-s W] [--trace F]
//     open-loop POST /v1/jobs at R requests/s (keep-alive, up to 256 connections): submit latency
//     percentiles. Node rather than loadgen.py: Python threads do not hold 1,000 requests/s here.
//     --warmup-s W: the first W seconds of the same schedule (a cold client: connections opened,
//     its JIT) are reported apart (warmup_p99_ms), the percentiles are of the S seconds after.
//   node queue_node.mjs healthz --url URL [--clients K] [--seconds S] [--pid P]
//     the no-op HTTP floor: GET /healthz as fast as K keep-alive connections (default 16, one request
//     in flight each) answer for S seconds; agentqd's (P) and this client's CPU-ms per round trip.
//   node queue_node.mjs jobs --url URL --key KEY --model M --jobs N [--clients K] [--warmup-jobs W] [--pid P] [--redis-pid R]
//     one HTTP request per job, shaped as the bullmq mode's end-to-end run: N 1-token jobs (loadgen.py's
//     job_body) submitted by K keep-alive connections (default 16 = the BullMQ producers), each with one
//     POST /v1/jobs in flight; then waits until all N are terminal. jobs_per_s = N / (the client's
//     clock before the first submit -> the server's last finished_at; one host, both wall clocks), as
//     the BullMQ figure is its first add -> its last completion. --warmup-jobs W: W jobs first from the
//     same process (as the bullmq mode measures its adds and its end to end the second time each),
//     reported apart as "warmup" (a cold client's jobs/s and CPU per job). A job that does not end completed or
//     incomplete (a 1-token job's success) or a submit that is not 2xx fails the run (exit 1).
//     CPU-ms per job of agentqd (P), its redis-server (R) and this client, from the first submit to
//     the moment the last job was seen terminal (the listing that reads the results is after it);
//     --threads 1: agentqd's per thread name over the same window (threads_per_job: CPU-ms, ms runnable
//     but waiting, voluntary / involuntary switches; scripts/bench/queue_threads.sh prints it).
//   node queue_node.mjs bullmq --bullmq-dir D --redis-port P --jobs N [--concurrency C] [--producers K]
//     the baseline: BullMQ (installed by queue.sh into its temp dir D with npm) on its own
//     redis-server. add_per_s: N no-op jobs added one Queue.add per job by K concurrent producers, no
//     worker running, the second time (the first, cold producers', as cold_add_per_s); jobs_per_s:
//     N more added the same way while a Worker (its own process, concurrency C) runs them, first add
//     to last completion, the second time the same worker runs N (the first, a cold worker's, as
//     cold_worker_jobs_per_s).
import fs from "node:fs";
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

// CPU milliseconds (user + system) of a process so far; 0 when pid is unset or gone.
// NOTE: clock ticks are 100/s on Linux (CLK_TCK; node has no sysconf): 10 ms a tick.
function cpu_ms(pid) {
  if (!pid) return 0;
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
    const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");  // the fields after comm
    return (Number(f[11]) + Number(f[12])) * 10;  // utime, stime: fields 14 and 15 of stat
  } catch {
    return 0;
  }
}
// Per thread of pid: [comm, voluntary switches, involuntary switches, ns on a CPU, ns runnable waiting].
// NOTE: schedstat's ns, not stat's ticks: those are whole 10 ms ticks per thread, and 64 job threads'
// truncations hide their share.
function thread_snap(pid) {
  const out = [];
  for (const tid of fs.readdirSync(`/proc/${pid}/task`)) {
    try {
      const dir = `/proc/${pid}/task/${tid}`;
      const status = fs.readFileSync(`${dir}/status`, "utf8");
      const sw = (k) => Number((status.match(new RegExp(`^${k}:\\s+(\\d+)`, "m")) || [0, 0])[1]);
      const [run, wait] = fs.readFileSync(`${dir}/schedstat`, "utf8").split(" ").map(Number);
      out.push([fs.readFileSync(`${dir}/comm`, "utf8").trim(), sw("voluntary_ctxt_switches"),
                sw("nonvoluntary_ctxt_switches"), run, wait]);
    } catch { /* the thread ended between the listing and the read */ }
  }
  return out;
}
// Per thread name over n jobs: {name: {threads, cpu_ms, wait_ms, vol, invol}} per job, between two snaps.
function thread_table(a, b, n) {
  const sum = (snap) => {
    const m = new Map();
    for (const [name, v, nv, run, wait] of snap) {
      const x = m.get(name) || [0, 0, 0, 0, 0];
      m.set(name, [x[0] + v, x[1] + nv, x[2] + run, x[3] + wait, x[4] + 1]);
    }
    return m;
  };
  const ma = sum(a), mb = sum(b), out = {};
  for (const [name, x] of mb) {
    const y = ma.get(name) || [0, 0, 0, 0, 0];
    out[name] = { threads: x[4], cpu_ms: +((x[2] - y[2]) / 1e6 / n).toFixed(3), wait_ms: +((x[3] - y[3]) / 1e6 / n).toFixed(3),
                  vol: +((x[0] - y[0]) / n).toFixed(2), invol: +((x[1] - y[1]) / n).toFixed(2) };
  }
  return out;
}
const self_cpu_ms = () => { const u = process.cpuUsage(); return (u.user + u.system) / 1000; };

// One request on a keep-alive agent; resolves {status, body} (never rejects: a network error is status 0).
function request(agent, u, key, method, path, body) {
  return new Promise((resolve) => {
    const headers = key ? { authorization: `Bearer ${key}` } : {};
    if (body !== undefined) Object.assign(headers, { "content-type": "application/json",
                                                      "content-length": Buffer.byteLength(body) });
    const req = http.request({ host: u.hostname, port: u.port, path, method, agent, headers }, (res) => {
      const chunks = [];
      res.on("data", (c) => chunks.push(c));
      res.on("end", () => resolve({ status: res.statusCode, body: Buffer.concat(chunks).toString() }));
    });
    req.on("error", (e) => resolve({ status: 0, body: e.message }));
    req.end(body);
  });
}

async function healthz(a) {
  const u = new URL(a.url);
  const clients = Number(a.clients || 16), seconds = Number(a.seconds || 3);
  const agent = new http.Agent({ keepAlive: true, maxSockets: clients });
  let ok = 0, errors = 0;
  const stop = performance.now() + seconds * 1000;
  const cpu0 = cpu_ms(Number(a.pid)), self0 = self_cpu_ms(), t0 = performance.now();
  const loop = async () => {
    while (performance.now() < stop) {
      const r = await request(agent, u, "", "GET", "/healthz");
      if (r.status === 200) ok++;
      else {
        errors++;
        return;  // a failed floor fails the run: no point spinning on it
      }
    }
  };
  await Promise.all(Array.from({ length: clients }, loop));
  const wall = (performance.now() - t0) / 1000;
  const cpu = cpu_ms(Number(a.pid)) - cpu0, self = self_cpu_ms() - self0;
  agent.destroy();
  const out = { clients, seconds: +wall.toFixed(3), requests: ok, errors, healthz_per_s: Math.round(ok / wall),
                client_cpu_ms_per_request: +(self / Math.max(1, ok)).toFixed(4) };
  if (a.pid) out.agentqd_cpu_ms_per_request = +(cpu / Math.max(1, ok)).toFixed(4);
  console.log(JSON.stringify(out));
  if (errors > 0) {
    console.error(`queue_node.mjs healthz: ${errors} requests failed`);
    process.exit(1);
  }
}

const TERMINAL = new Set(["completed", "failed", "cancelled", "incomplete", "requires_action"]);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function jobs(a) {
  const u = new URL(a.url);
  const n = Number(a.jobs || 5000), clients = Number(a.clients || 16), tag = a.tag || "e";
  const n_warm = Number(a["warmup-jobs"] || 0);
  const pid = Number(a.pid || 0), redis_pid = Number(a["redis-pid"] || 0);
  const agent = new http.Agent({ keepAlive: true, maxSockets: clients + 1 });  // + the poller's
  const fail = (why) => {
    console.error(`queue_node.mjs jobs: ${why}`);  // stderr too: queue.sh keeps only stdout's last line
    console.log(JSON.stringify({ jobs: n, clients, error: why }));
    process.exit(1);
  };
  let first_error = "";
  // count jobs by `clients` connections; their ids and submit latencies
  const submit_all = async (count, job_tag) => {
    const ids = new Array(count), submit_ms = new Array(count);
    let next = 0;
    const producer = async () => {
      while (next < count && !first_error) {
        const i = next++;
        // NOTE: loadgen.py's job_body (its content differs by the tag only): the same prompt tokens
        const body = JSON.stringify({ model: a.model, messages: [{ role: "user", content: `Once upon a time ${job_tag}${i}` }],
                                      max_turns: 1, max_tokens_per_turn: 1 });
        const ts = performance.now();
        const r = await request(agent, u, a.key, "POST", "/v1/jobs", body);
        submit_ms[i] = performance.now() - ts;
        if (r.status !== 200 && r.status !== 202) { first_error ||= `submit ${i}: ${r.status} ${r.body.slice(0, 200)}`; return; }
        ids[i] = JSON.parse(r.body).id;
      }
    };
    await Promise.all(Array.from({ length: clients }, producer));
    if (first_error) fail(first_error);
    return { ids, submit_ms };
  };
  // Wait: poll only the last job submitted (a GET by id every 50 ms: cheap beside ~1,000 jobs/s); jobs
  // run about in submit order, so when it is terminal nearly all are. The end time is the server's
  // finished_at, so the poll's period does not enter the figure.
  const get = async (id) => {
    const r = await request(agent, u, a.key, "GET", `/v1/jobs/${id}`);
    if (r.status !== 200) fail(`GET ${id}: ${r.status} ${r.body.slice(0, 200)}`);
    return JSON.parse(r.body);
  };
  const deadline = performance.now() + 300e3;
  const wait_terminal = async (id) => {
    for (;;) {
      const j = await get(id);
      if (TERMINAL.has(j.status)) return j;
      if (performance.now() > deadline) fail(`job ${id} not terminal after 300 s`);
      await sleep(50);
    }
  };
  // --warmup-jobs W: W jobs first, from this same process, as the bullmq mode measures its adds and
  // its end to end the second time each: the figure is of a warm client (its JIT, its heap); a cold
  // client's W jobs are reported apart (warmup: their jobs/s to the last one's finished_at).
  let warmup = null;
  if (n_warm > 0) {
    const w_wall_ms = Date.now(), w_self0 = self_cpu_ms();
    const w = await submit_all(n_warm, `${tag}w`);
    const last = await wait_terminal(w.ids[n_warm - 1]);
    warmup = { jobs: n_warm, jobs_per_s: Math.round(n_warm / (last.finished_at - w_wall_ms / 1000)),
               client_cpu_ms_per_job: +((self_cpu_ms() - w_self0) / n_warm).toFixed(3) };
  }
  const threads0 = a.threads && pid ? thread_snap(pid) : null;  // --threads 1: the per-thread table
  const cpu0 = cpu_ms(pid), rcpu0 = cpu_ms(redis_pid), self0 = self_cpu_ms();
  const start_wall_ms = Date.now(), t0 = performance.now();
  const { ids, submit_ms } = await submit_all(n, tag);
  const submit_s = (performance.now() - t0) / 1000;
  await wait_terminal(ids[n - 1]);
  let cpu1 = cpu_ms(pid), rcpu1 = cpu_ms(redis_pid), self1 = self_cpu_ms();
  let threads1 = threads0 ? thread_snap(pid) : null;
  // Read all N back through the list endpoint (100 a page, newest first; after the timed window).
  const want = new Set(ids), got = new Map();
  let cursor = "";
  while (got.size < want.size) {
    const r = await request(agent, u, a.key, "GET", `/v1/jobs?limit=100${cursor ? `&after=${cursor}` : ""}`);
    if (r.status !== 200) fail(`GET /v1/jobs: ${r.status} ${r.body.slice(0, 200)}`);
    const page = JSON.parse(r.body);
    for (const j of page.data) if (want.has(j.id)) got.set(j.id, j);
    if (!page.has_more || !page.next_cursor) break;
    cursor = page.next_cursor;
  }
  // Stragglers (not yet terminal when the last one was): wait for each; the CPU window then ends later.
  let stragglers = 0;
  for (const id of ids) {
    const j = got.get(id);
    if (!j || !TERMINAL.has(j.status)) {
      stragglers++;
      got.set(id, await wait_terminal(id));
    }
  }
  if (stragglers > 0) {
    [cpu1, rcpu1, self1] = [cpu_ms(pid), cpu_ms(redis_pid), self_cpu_ms()];
    if (threads0) threads1 = thread_snap(pid);
  }
  agent.destroy();
  const all = ids.map((id) => got.get(id));
  const by_status = {};
  for (const j of all) by_status[j.status] = (by_status[j.status] || 0) + 1;
  // NOTE: a 1-token job ends "incomplete" (truncated at max_tokens_per_turn): that is its success
  const failed = all.filter((j) => j.status !== "completed" && j.status !== "incomplete").length;
  const last_finished_s = Math.max(...all.map((j) => j.finished_at));
  const first_created_s = Math.min(...all.map((j) => j.created_at));
  const span_s = last_finished_s - start_wall_ms / 1000;
  const lat_ms = all.map((j) => 1000 * (j.finished_at - j.created_at));
  const out = { jobs: n, clients, by_status, failed, stragglers,
    submit_s: +submit_s.toFixed(3), submit_per_s: Math.round(n / submit_s),
    submit_p50_ms: +pct(submit_ms, 0.5).toFixed(2), submit_p99_ms: +pct(submit_ms, 0.99).toFixed(2),
    span_s: +span_s.toFixed(3), jobs_per_s: Math.round(n / span_s),
    jobs_per_s_server_clock: Math.round(n / (last_finished_s - first_created_s)),
    job_latency_p50_ms: +pct(lat_ms, 0.5).toFixed(1), job_latency_p99_ms: +pct(lat_ms, 0.99).toFixed(1),
    client_cpu_ms_per_job: +((self1 - self0) / n).toFixed(3) };
  if (pid) out.agentqd_cpu_ms_per_job = +((cpu1 - cpu0) / n).toFixed(3);
  if (redis_pid) out.redis_cpu_ms_per_job = +((rcpu1 - rcpu0) / n).toFixed(3);
  if (threads0) out.threads_per_job = thread_table(threads0, threads1, n);
  if (warmup) out.warmup = warmup;
  console.log(JSON.stringify(out));
  if (failed > 0) {
    const j = all.find((j) => j.status !== "completed" && j.status !== "incomplete");
    console.error(`queue_node.mjs jobs: ${failed} of ${n} jobs failed (${j.id}: ${j.status}, ${JSON.stringify(j.error)})`);
    process.exit(1);
  }
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
    // NOTE: a message at every n completions: the first end-to-end run (a cold worker), then the
    // second (warm), both with this one worker process.
    let done = 0;
    const w = new Worker("bench", async () => {}, { connection, concurrency });
    w.on("completed", () => {
      if (++done % n === 0) process.send({ done: Date.now() });
    });
    process.send({ ready: true });
    return;
  }
  const queue = new Queue("bench", { connection });
  await queue.waitUntilReady();
  // 1. adds alone (no worker): the one-job-per-call add rate, measured the second time (the
  // first, cold producers', as cold_add_per_s): agentq's acceptance is measured on a warm server.
  const adds = async (tag) => {
    const t0 = performance.now();
    await produce(queue, n, producers, tag);
    const s = (performance.now() - t0) / 1000;
    await queue.obliterate({ force: true });
    return s;
  };
  const coldAddS = await adds("add_cold");
  const addS = await adds("add");
  // 2. end to end: the same adds with a worker process running them, twice with the same worker:
  // the first run's worker is cold (a new process: its JIT, its connections), the second's warm,
  // as agentq's run (queue_node.mjs jobs --warmup-jobs) is measured after its client's first N
  // jobs. jobs_per_s is the warm run's; the cold run's is reported apart (cold_worker_*).
  const child = fork(fileURLToPath(import.meta.url), ["bullmq", ...process.argv.slice(3), "--role", "worker"]);
  await new Promise((r) => child.on("message", (m) => m.ready && r()));
  const dones = [];
  let on_done = null;
  child.on("message", (m) => {
    if (!m.done) return;
    dones.push(m.done);
    if (on_done) on_done();
  });
  const e2e = async (tag) => {
    const want = dones.length + 1;
    const startMs = Date.now();
    await produce(queue, n, producers, tag);
    const addedMs = Date.now();
    while (dones.length < want) await new Promise((r) => (on_done = r));
    const s = (dones[want - 1] - startMs) / 1000;
    return { s, jobs_per_s: Math.round(n / s), add_per_s: Math.round(n / ((addedMs - startMs) / 1000)) };
  };
  const cold = await e2e("e2e_cold");
  const warm = await e2e("e2e");
  child.kill();
  await queue.close();
  console.log(JSON.stringify({ bullmq_jobs: n, producers, worker_concurrency: concurrency,
    add_s: +addS.toFixed(3), add_per_s: Math.round(n / addS),
    e2e_s: +warm.s.toFixed(3), jobs_per_s: warm.jobs_per_s, e2e_add_per_s: warm.add_per_s,
    cold_add_per_s: Math.round(n / coldAddS), cold_worker_e2e_s: +cold.s.toFixed(3),
    cold_worker_jobs_per_s: cold.jobs_per_s }));
  process.exit(0);
}

const cmd = process.argv[2];
const a = args();
if (cmd === "submit") await submit(a);
else if (cmd === "bullmq") await bullmq(a);
else if (cmd === "healthz") await healthz(a);
else if (cmd === "jobs") await jobs(a);
else {
  console.error("usage: queue_node.mjs submit|healthz|jobs|bullmq ...");
  process.exit(2);
}

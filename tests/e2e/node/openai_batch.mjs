// The official openai npm client against agentqd's Batch API (tests/e2e/openai_batch.sh): files.create
// (multipart, streamed to disk) -> batches.create -> batches.retrieve until completed ->
// files.content parsed (one output line per custom_id in OpenAI's shape); a batch.completed
// webhook verified by client.webhooks.unwrap; cancel; tenant scoping (another key gets 404);
// back-pressure (429 queue_full, distinct from rate_limit_error, with Retry-After); and fairness:
// tenant B's interactive requests during tenant A's batch burst wait little in the queue.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import OpenAI, { toFile } from 'openai';

const base = process.env.AGENTQ_URL;
const model = process.env.AGENTQ_MODEL_NAME;
const perTenantBound = Number(process.env.AGENTQ_TENANT_BOUND);
let a, b, secretA, hookServer, hookUrl;
const hooks = [];

async function admin(method, path, body) {
  const r = await fetch(base + path, {
    method,
    headers: { authorization: `Bearer ${process.env.AGENTQ_ADMIN_KEY}`, 'content-type': 'application/json' },
    body: body ? JSON.stringify(body) : undefined,
  });
  return r.json();
}

function jsonl(n, prefix, url = '/v1/chat/completions', maxTokens = 8) {
  const lines = [];
  for (let i = 0; i < n; i++) {
    const body = url === '/v1/responses'
      ? { model, input: `Once upon a time ${i}`, max_output_tokens: maxTokens }
      : { model, messages: [{ role: 'system', content: 'Tell a story.' }, { role: 'user', content: `Once upon a time ${i}` }], max_tokens: maxTokens };
    lines.push(JSON.stringify({ custom_id: `${prefix}-${i}`, method: 'POST', url, body }));
  }
  return lines.join('\n') + '\n';
}

async function settle(client, id, want = ['completed', 'failed', 'expired', 'cancelled'], seconds = 240) {
  for (let i = 0; i < seconds * 5; i++) {
    const x = await client.batches.retrieve(id);
    if (want.includes(x.status)) return x;
    await new Promise((ok) => setTimeout(ok, 200));
  }
  throw new Error(`batch ${id} did not reach ${want}`);
}

before(async () => {
  const ka = await admin('POST', '/v1/keys', { tenant: 'batch-a' });
  const kb = await admin('POST', '/v1/keys', { tenant: 'batch-b' });
  secretA = ka.webhook_secret;
  a = new OpenAI({ apiKey: ka.key, baseURL: base + '/v1', maxRetries: 0, timeout: 120000 });
  b = new OpenAI({ apiKey: kb.key, baseURL: base + '/v1', maxRetries: 0, timeout: 120000 });
  hookServer = await new Promise((resolve) => {
    const s = http.createServer((req, res) => {
      let body = '';
      req.on('data', (c) => (body += c));
      req.on('end', () => { hooks.push({ body, headers: req.headers }); res.end('ok'); });
    });
    s.listen(0, '127.0.0.1', () => resolve(s));
  });
  hookUrl = `http://127.0.0.1:${hookServer.address().port}/hook`;
});

after(() => hookServer?.close());

test('batch: files.create -> batches.create -> retrieve until completed -> files.content', async () => {
  const ep = await fetch(base + '/v1/webhook_endpoints', {
    method: 'POST', headers: { authorization: `Bearer ${a.apiKey}`, 'content-type': 'application/json' },
    body: JSON.stringify({ url: hookUrl, events: ['batch.completed'] }),
  }).then((r) => r.json());
  assert.match(ep.id, /^we_/);
  const n = 12;
  const file = await a.files.create({ file: await toFile(Buffer.from(jsonl(n, 'req')), 'input.jsonl'), purpose: 'batch' });
  assert.equal(file.object, 'file');
  assert.equal(file.purpose, 'batch');
  assert.ok(file.bytes > 0);
  assert.equal((await a.files.retrieve(file.id)).id, file.id);
  const batch = await a.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h', metadata: { job: 'e2e' } });
  assert.equal(batch.object, 'batch');
  assert.match(batch.id, /^batch_/);
  assert.ok(['validating', 'in_progress'].includes(batch.status));
  assert.deepEqual(batch.metadata, { job: 'e2e' });
  assert.equal(batch.request_counts.total, n);
  const done = await settle(a, batch.id);
  assert.equal(done.status, 'completed');
  assert.equal(done.request_counts.completed, n);
  assert.equal(done.request_counts.failed, 0);
  assert.ok(done.in_progress_at && done.finalizing_at && done.completed_at);
  assert.ok(done.output_file_id);
  assert.equal(done.error_file_id, null);
  const text = await (await a.files.content(done.output_file_id)).text();
  const lines = text.trim().split('\n').map((l) => JSON.parse(l));
  assert.equal(lines.length, n);
  assert.deepEqual(lines.map((l) => l.custom_id), [...Array(n).keys()].map((i) => `req-${i}`));
  for (const l of lines) {
    assert.match(l.id, /^batch_req_/);
    assert.equal(l.error, null);
    assert.equal(l.response.status_code, 200);
    assert.equal(l.response.body.object, 'chat.completion');
    assert.equal(typeof l.response.body.choices[0].message.content, 'string');
    assert.ok(l.response.body.usage.completion_tokens > 0);
  }
  // usage as OpenAI's usage API shapes it: the batch's jobs by model
  const usage = await fetch(`${base}/v1/usage?start=${Math.floor(Date.now() / 1000) - 3600}&group_by=model`, { headers: { authorization: `Bearer ${a.apiKey}` } }).then((r) => r.json());
  assert.equal(usage.object, 'page');
  const results = usage.data.flatMap((bucket) => bucket.results);
  const mine = results.find((x) => x.model === model);
  assert.ok(mine && mine.num_model_requests >= n && mine.output_tokens > 0 && mine.input_tokens > 0, JSON.stringify(usage));
  // the batch.completed webhook, signed with the key's secret
  let got = null;
  for (let i = 0; i < 200 && !got; i++) {
    got = hooks.find((h) => JSON.parse(h.body).data.id === batch.id);
    if (!got) await new Promise((ok) => setTimeout(ok, 100));
  }
  assert.ok(got, 'no batch.completed webhook');
  const event = await a.webhooks.unwrap(got.body, got.headers, secretA);
  assert.equal(event.type, 'batch.completed');
  // listed, tenant-scoped, deletable
  const page = await a.batches.list({ limit: 5 });
  assert.ok(page.data.some((x) => x.id === batch.id));
  await assert.rejects(() => b.batches.retrieve(batch.id), (e) => e instanceof OpenAI.NotFoundError);
  await assert.rejects(() => b.files.retrieve(file.id), (e) => e instanceof OpenAI.NotFoundError);
  await assert.rejects(() => b.files.content(done.output_file_id), (e) => e instanceof OpenAI.NotFoundError);
  const del = await a.files.delete(file.id);
  assert.equal(del.deleted, true);
  await assert.rejects(() => a.files.retrieve(file.id), (e) => e instanceof OpenAI.NotFoundError);
});

test('batch: a bad line is a 400 naming the line; responses endpoint; cancel', async () => {
  const bad = jsonl(2, 'x') + '{"custom_id":"x-0","method":"POST","url":"/v1/chat/completions","body":{}}\n';
  await assert.rejects(async () => a.files.create({ file: await toFile(Buffer.from(bad), 'bad.jsonl'), purpose: 'batch' }),
    (e) => e instanceof OpenAI.BadRequestError && /^line 3: /.test(e.error.message));
  const file = await a.files.create({ file: await toFile(Buffer.from(jsonl(4, 'r', '/v1/responses')), 'r.jsonl'), purpose: 'batch' });
  const done = await settle(a, (await a.batches.create({ input_file_id: file.id, endpoint: '/v1/responses', completion_window: '24h' })).id);
  assert.equal(done.status, 'completed');
  const lines = (await (await a.files.content(done.output_file_id)).text()).trim().split('\n').map((l) => JSON.parse(l));
  assert.equal(lines.length, 4);
  assert.equal(lines[0].response.body.object, 'response');
  // cancel a long batch: cancelling, then cancelled with what ran in the output file and the rest as errors
  const big = await a.files.create({ file: await toFile(Buffer.from(jsonl(200, 'c', '/v1/chat/completions', 64)), 'c.jsonl'), purpose: 'batch' });
  const running = await a.batches.create({ input_file_id: big.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
  const c = await a.batches.cancel(running.id);
  assert.ok(['cancelling', 'cancelled'].includes(c.status));
  const gone = await settle(a, running.id, ['cancelled'], 60);
  assert.ok(gone.cancelled_at);
  assert.equal(gone.request_counts.completed + gone.request_counts.failed, 200);
  const errs = (await (await a.files.content(gone.error_file_id)).text()).trim().split('\n').map((l) => JSON.parse(l));
  assert.ok(errs.length > 0);
  assert.ok(errs.some((l) => l.error?.code === 'batch_cancelled'));
});

test('fairness and back-pressure: tenant B waits little during tenant A\'s burst; 429 queue_full past the bound', async () => {
  const n = perTenantBound - 1000;
  const file = await a.files.create({ file: await toFile(Buffer.from(jsonl(n, 'burst', '/v1/chat/completions', 32)), 'burst.jsonl'), purpose: 'batch' });
  const burst = await a.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
  await settle(a, burst.id, ['in_progress', 'completed'], 60);
  // a batch that cannot fit under the tenant's bound is refused
  const again = await a.files.create({ file: await toFile(Buffer.from(jsonl(perTenantBound + 1, 'more')), 'more.jsonl'), purpose: 'batch' });
  await assert.rejects(() => a.batches.create({ input_file_id: again.id, endpoint: '/v1/chat/completions', completion_window: '24h' }),
    (e) => e instanceof OpenAI.RateLimitError && e.error?.type === 'queue_full' && Number(e.headers.get('retry-after')) >= 1);
  // tenant B is not held back by A's queue: interactive answers while A's batch is still queued
  const waits = [], rtts = [];
  for (let i = 0; i < 5; i++) {
    const t0 = Date.now();
    const c = await b.chat.completions.create({ model, messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: 8 });
    rtts.push(Date.now() - t0);
    const timeline = await fetch(`${base}/v1/jobs/job_${c.id.slice('chatcmpl-'.length)}/timeline`, { headers: { authorization: `Bearer ${b.apiKey}` } }).then((r) => r.json());
    const q = (timeline.spans ?? []).find((s) => s.kind === 'queue_wait' && s.turn === null && s.end_ms !== null);
    assert.ok(q, 'no queue_wait span in the timeline of ' + c.id);
    waits.push(q.end_ms - q.start_ms);
  }
  const mid = await a.batches.retrieve(burst.id);
  const open = mid.request_counts.total - mid.request_counts.completed - mid.request_counts.failed;
  waits.sort((x, y) => x - y);
  rtts.sort((x, y) => x - y);
  console.log(JSON.stringify({ fairness: { tenant_b_queue_wait_ms_median: waits[2], tenant_b_queue_wait_ms_max: waits[4],
                                           tenant_b_round_trip_ms_median: rtts[2], tenant_a_open_jobs_after: open } }));
  assert.ok(open > 0, 'tenant A\'s burst finished before B was measured');
  assert.ok(waits[2] < 1000, `tenant B waited ${waits[2]} ms (median) in the queue behind A's batch`);
  await a.batches.cancel(burst.id);
  await settle(a, burst.id, ['cancelled', 'completed'], 120);
});

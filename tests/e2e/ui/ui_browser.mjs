// Headless Chromium test of the agentqd dashboard (run by tests/e2e/ui_browser.sh, which starts the
// server). HTTP checks of /ui and GET /v1/events first, then the page: key, submit, live list,
// job page with timeline, engine page; screenshots land in AGENTQ_ARTIFACT_DIR.
import { chromium } from 'playwright-core';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const base = process.env.AGENTQ_URL;
const adminKey = process.env.AGENTQ_ADMIN_KEY;
const artifacts = process.env.AGENTQ_ARTIFACT_DIR;
const modelName = process.env.AGENTQ_MODEL_NAME || 'stories260K';
const t0 = Date.now();
const step = (what) => console.log(`[${((Date.now() - t0) / 1000).toFixed(1)} s] ${what}`);

async function call(key, method, p, body, headers = {}) {
  const res = await fetch(base + p, {
    method,
    headers: { Authorization: `Bearer ${key}`, ...(body ? { 'Content-Type': 'application/json' } : {}), ...headers },
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await res.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: res.status, headers: res.headers, text, json };
}

// Read SSE frames from GET /v1/events until pred(frames) or timeout; returns the frames.
async function readEvents(key, headers, pred, timeoutMs = 8000) {
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), timeoutMs);
  const frames = [];
  try {
    const res = await fetch(`${base}/v1/events${headers.query || ''}`, {
      headers: { Authorization: `Bearer ${key}`, Accept: 'text/event-stream', ...(headers.lastId ? { 'Last-Event-ID': headers.lastId } : {}) },
      signal: ctl.signal,
    });
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type'), /text\/event-stream/);
    let buf = '';
    const dec = new TextDecoder();
    for await (const chunk of res.body) {
      buf += dec.decode(chunk, { stream: true });
      let at;
      while ((at = buf.indexOf('\n\n')) >= 0) {
        const frame = buf.slice(0, at);
        buf = buf.slice(at + 2);
        const f = {};
        for (const line of frame.split('\n')) {
          const c = line.indexOf(':');
          if (c > 0) f[line.slice(0, c)] = line.slice(c + 1).trim();
        }
        if (f.id) frames.push({ id: Number(f.id), event: f.event, data: JSON.parse(f.data) });
      }
      if (pred(frames)) break;
    }
  } catch (e) {
    if (e.name !== 'AbortError') throw e;
  } finally {
    clearTimeout(timer);
    ctl.abort();
  }
  return frames;
}

const TERMINAL = ['completed', 'failed', 'cancelled', 'incomplete'];

// Poll until the job is terminal or in one of the statuses in `also`.
async function waitJob(key, id, timeoutMs = 20000, also = []) {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const r = await call(key, 'GET', `/v1/jobs/${id}`);
    if (TERMINAL.includes(r.json.status) || also.includes(r.json.status)) return r.json;
    assert.ok(Date.now() < end, `job ${id} still ${r.json.status}`);
    await new Promise((res) => setTimeout(res, 100));
  }
}

const jobBody = (prompt, meta) => ({
  model: modelName, messages: [{ role: 'user', content: prompt }], max_turns: 1, max_tokens_per_turn: 24, metadata: meta,
});

// --- keys -------------------------------------------------------------------------------------
const mk = async (tenant) => (await call(adminKey, 'POST', '/v1/keys', { tenant })).json.key;
const key = await mk('ui');
const otherKey = await mk('ui-other');
assert.ok(key && otherKey, 'tenant keys created');
step('keys created');

// --- /ui over plain HTTP ----------------------------------------------------------------------
{
  const page = await fetch(`${base}/ui`);
  assert.equal(page.status, 200);
  assert.match(page.headers.get('content-type'), /^text\/html/);
  assert.match(page.headers.get('content-security-policy'), /default-src 'none'; script-src 'self'/);
  assert.equal(page.headers.get('x-content-type-options'), 'nosniff');
  const etag = page.headers.get('etag');
  assert.match(etag, /^"[0-9a-f]{20}"$/);
  assert.equal((await fetch(`${base}/ui`, { headers: { 'If-None-Match': etag } })).status, 304);
  const js = await fetch(`${base}/ui/app.js`);
  assert.match(js.headers.get('content-type'), /^text\/javascript/);
  assert.match(await js.text(), /import/);
  assert.match((await fetch(`${base}/ui/app.css`)).headers.get('content-type'), /^text\/css/);
  assert.equal((await fetch(`${base}/ui/nope.js`)).status, 404);
  assert.equal((await fetch(`${base}/v1/events`)).status, 401);
  assert.equal((await call(key, 'GET', '/v1/events?after=x')).status, 400);
  step('/ui headers, ETag/304, 404, /v1/events auth ok');
}

// --- GET /v1/events: tenant scope, ?after=, Last-Event-ID ------------------------------------------
{
  const other = await call(otherKey, 'POST', '/v1/jobs', jobBody('Tom had a dog', { who: 'other' }));
  assert.equal(other.status, 202);
  await waitJob(otherKey, other.json.id);
  const replay = await readEvents(key, { query: '?after=0' }, () => false, 300);
  assert.equal(replay.length, 0, 'tenant ui sees no event of tenant ui-other');
  const mine = await readEvents(otherKey, { query: '?after=0' },
    (f) => f.some((e) => e.event === 'status' && TERMINAL.includes(e.data.data.status)));
  assert.ok(mine.length >= 3, `tenant ui-other replays its events (${mine.length})`);
  assert.ok(mine.every((e) => e.data.job_id === other.json.id));
  const resumed = await readEvents(otherKey, { lastId: String(mine[0].id) }, (f) => f.length >= mine.length - 1);
  assert.equal(resumed[0].id, mine[1].id, 'Last-Event-ID resumes after that event');
  const list = await call(otherKey, 'GET', `/v1/events?after=${mine[0].id}`);
  assert.equal(list.json.object, 'list');
  assert.equal(list.json.data[0].id, mine[1].id);
  step(`/v1/events: tenant-scoped replay (${mine.length} events), Last-Event-ID and ?after= resume`);
}

// --- a client-side tool call, answered through the API (the job page shows call and result) --------
let toolJobId;
{
  const body = jobBody('What is the weather in Paris?', { suite: 'tools' });
  body.tools = [{ type: 'function', function: { name: 'get_weather', parameters: {
    type: 'object', properties: { city: { type: 'string', enum: ['Paris', 'London'] } }, required: ['city'] } } }];
  body.tool_choice = 'required';
  body.max_turns = 2;
  body.max_tokens_per_turn = 256;  // room for the whole forced call
  body.parallel_tool_calls = false;
  const r = await call(key, 'POST', '/v1/jobs', body);
  assert.equal(r.status, 202, r.text);
  toolJobId = r.json.id;
  const job = await waitJob(key, toolJobId, 20000, ['requires_action']);
  assert.equal(job.status, 'requires_action', JSON.stringify(job));
  const outs = job.required_action.tool_calls.map((c) => ({ tool_call_id: c.id, output: '{"forecast":"sunny"}' }));
  assert.equal((await call(key, 'POST', `/v1/jobs/${toolJobId}/tool_outputs`, { tool_outputs: outs })).status, 200);
  await waitJob(key, toolJobId, 20000, ['requires_action']);
  step(`tool job ${toolJobId}: requires_action, outputs submitted`);
}

// --- the browser --------------------------------------------------------------------------------
const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'agentq-ui-chromium-'));
// NOTE: a fresh profile each run; without the background-networking flags Chromium stalls on a
// closed network. Playwright passes --user-data-dir itself for a persistent context.
const ctx = await chromium.launchPersistentContext(profile, {
  executablePath: process.env.AGENTQ_CHROMIUM || '/usr/bin/chromium',
  headless: true,
  viewport: { width: 1280, height: 900 },
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync'],
});
const problems = [];
const urls = [];
try {
  const page = await ctx.newPage();
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('console', (m) => { if (m.type() === 'error' && !/status of (401|404)/.test(m.text())) problems.push(`console: ${m.text()}`); });
  page.on('request', (r) => urls.push(r.url()));
  page.setDefaultTimeout(15000);
  step('chromium started');

  await page.goto(`${base}/ui`);
  await page.locator('#key-input').fill('aq_not_a_key');
  await page.locator('#key-form button').click();
  await page.locator('#key-error', { hasText: '401' }).waitFor();
  assert.equal(await page.evaluate(() => sessionStorage.getItem('agentq.api_key')), null, 'a refused key is dropped');
  await page.screenshot({ path: path.join(artifacts, 'key.png') });
  await page.locator('#key-input').fill(key);
  await page.locator('#key-form button').click();
  await page.locator('h1', { hasText: 'Jobs' }).waitFor();
  await page.locator('.live[data-state=live]').waitFor();
  step('a refused key shows the form again; the right key opens the live jobs page');

  // one job through the page's form, one through the API (it must appear without a reload)
  await page.locator('details.card summary').click();
  await page.locator('.submit-form select[name=model] option').first().waitFor({ state: 'attached' });
  await page.locator('.submit-form textarea').fill('Once upon a time');
  await page.locator('.submit-form button').click();
  await page.locator('.submit-form .muted', { hasText: 'submitted job_' }).waitFor();
  const pageJobId = (await page.locator('.submit-form .muted').textContent()).replace('submitted ', '').trim();
  const apiJob = await call(key, 'POST', '/v1/jobs', jobBody('The cat sat', { suite: 'e2e' }));
  assert.equal(apiJob.status, 202);
  // the tiny model often stops at max_tokens_per_turn: incomplete is a finished run too
  for (const id of [pageJobId, apiJob.json.id])
    await page.locator(`tr[data-job-id="${id}"]:is([data-status=completed], [data-status=incomplete])`).waitFor({ timeout: 25000 });
  step(`both jobs finished on the live list (${pageJobId}, ${apiJob.json.id})`);

  await page.locator('input[name=meta]').fill('suite=e2e');
  await page.locator('.filters button').click();
  await page.locator(`tr[data-job-id="${pageJobId}"]`).waitFor({ state: 'detached' });
  assert.equal(await page.locator('tbody tr[data-job-id]').count(), 1, 'metadata filter keeps one job');
  await page.locator('select[name=status]').selectOption('failed');
  await page.locator('tbody td', { hasText: 'No jobs match.' }).waitFor();
  await page.locator('select[name=status]').selectOption('');
  await page.locator('input[name=meta]').fill('');
  await page.locator('.filters button').click();
  await page.locator(`tr[data-job-id="${pageJobId}"]`).waitFor();
  step('status and metadata filters');
  await page.screenshot({ path: path.join(artifacts, 'jobs.png'), fullPage: true });

  await page.locator(`tr[data-job-id="${pageJobId}"] a`).click();
  await page.locator('.transcript .role-assistant').waitFor();
  await page.locator('#timeline svg.timeline, #timeline .unavailable, #timeline p.muted:not(:has-text("loading"))').first().waitFor();
  const hasTimeline = await page.locator('#timeline svg.timeline').count() > 0;
  if (hasTimeline) {
    await page.locator('#timeline details.timeline-table summary').click();
    assert.ok(await page.locator('#timeline details.timeline-table tbody tr').count() >= 3, 'timeline table rows');
  }
  const turns = await page.locator('table.turns tbody tr').count();
  assert.ok(turns >= 1, 'turns table has the turn');
  await page.locator('.live', { hasText: 'ended' }).waitFor();
  step(`job page: transcript, ${turns} turn(s), timeline ${hasTimeline ? 'chart drawn' : 'not available on this server'}`);
  await page.screenshot({ path: path.join(artifacts, 'job.png'), fullPage: true });

  await page.goto(`${base}/ui#/jobs/${toolJobId}`);
  await page.locator('.tool-call .tool-result', { hasText: 'sunny' }).waitFor();
  assert.match(await page.locator('.tool-call pre.args').first().textContent(), /"city"/);
  step('tool job page: call arguments and result');
  await page.screenshot({ path: path.join(artifacts, 'job_tools.png'), fullPage: true });

  await page.locator('nav a[data-nav=engine]').click();
  await page.locator('h1', { hasText: 'Engine' }).waitFor();
  await page.locator('main svg.chart, main .unavailable, main .card p.muted:not(:has-text("loading"))').first().waitFor();
  const charts = await page.locator('main svg.chart').count();
  step(`engine page: ${charts ? `${charts} charts` : 'stats not available on this server'}`);
  await page.screenshot({ path: path.join(artifacts, 'engine.png'), fullPage: true });

  assert.equal(await page.evaluate(() => sessionStorage.getItem('agentq.api_key')), key);
  assert.ok(!urls.some((u) => u.includes(key)), 'the key never appears in a URL');
  assert.deepEqual(problems, [], 'no page errors or CSP violations');
} finally {
  await ctx.close();
  fs.rmSync(profile, { recursive: true, force: true });
}
step('done');

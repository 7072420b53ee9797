// Server-side tool requests are signed with the submitting key's whsec_ secret (run by
// tests/e2e/tool_signing.sh, which starts agentqd): a tool server verifies them with the
// standardwebhooks package and the secret its owner got at key creation; after
// `rotate_secret` the next job's calls verify with the new secret only.
import { Webhook } from 'standardwebhooks';
import assert from 'node:assert/strict';
import http from 'node:http';

const base = process.env.AGENTQ_URL;
const adminKey = process.env.AGENTQ_ADMIN_KEY;
const modelName = process.env.AGENTQ_MODEL_NAME || 'stories260K';

async function call(key, method, p, body) {
  const res = await fetch(base + p, {
    method,
    headers: { Authorization: `Bearer ${key}`, ...(body ? { 'Content-Type': 'application/json' } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await res.text();
  return { status: res.status, json: JSON.parse(text) };
}

// The tool server: records each request's headers and raw body.
const received = [];
const server = http.createServer((req, res) => {
  let body = '';
  req.on('data', (c) => { body += c; });
  req.on('end', () => {
    received.push({ headers: req.headers, body });
    res.writeHead(200, { 'Content-Type': 'application/json' });
    res.end(JSON.stringify({ output: 'sunny' }));
  });
});
await new Promise((r) => server.listen(0, '127.0.0.1', r));
const toolUrl = `http://127.0.0.1:${server.address().port}/look`;

function verifies(secret, r) {
  try {
    new Webhook(secret).verify(r.body, r.headers);
    return true;
  } catch {
    return false;
  }
}

async function runJob(key) {
  const sub = await call(key, 'POST', '/v1/jobs', {
    model: modelName,
    messages: [{ role: 'user', content: 'weather?' }],
    tools: [{
      type: 'function',
      function: { name: 'look', parameters: { type: 'object', properties: { q: { enum: ['Paris', 'London'] } }, required: ['q'] } },
      execution: { type: 'http', url: toolUrl, timeout_ms: 5000 },
    }],
    tool_choice: 'required', parallel_tool_calls: false, max_turns: 2, max_tokens_per_turn: 128,
  });
  assert.equal(sub.status, 202, JSON.stringify(sub.json));
  for (let i = 0; i < 300; ++i) {
    const j = await call(key, 'GET', `/v1/jobs/${sub.json.id}`);
    if (['completed', 'incomplete', 'failed', 'cancelled'].includes(j.json.status)) return j.json;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`job ${sub.json.id} did not finish`);
}

try {
  const made = await call(adminKey, 'POST', '/v1/keys', { tenant: 'tools-tenant' });
  assert.equal(made.status, 201, JSON.stringify(made.json));
  const { key, webhook_secret: secret1, id: keyId } = made.json;
  assert.match(secret1, /^whsec_/);

  const job1 = await runJob(key);
  assert.ok(received.length >= 1, `no tool request arrived (job ${JSON.stringify(job1)})`);
  for (const r of received) {
    assert.ok(verifies(secret1, r), `a tool request did not verify with the key's secret: ${JSON.stringify(r.headers)}`);
    assert.equal(r.headers['webhook-id'], JSON.parse(r.body).call_id);
  }
  console.log(`job 1: ${received.length} tool request(s), each verified with the key's whsec_ secret`);

  const rotated = await call(key, 'POST', `/v1/keys/${keyId}/rotate_secret`);
  assert.equal(rotated.status, 200, JSON.stringify(rotated.json));
  const secret2 = rotated.json.webhook_secret;
  assert.notEqual(secret2, secret1);
  const n1 = received.length;
  await runJob(key);
  assert.ok(received.length > n1, 'job 2 sent no tool request');
  for (const r of received.slice(n1)) {
    assert.ok(verifies(secret2, r), 'after rotation a tool request did not verify with the new secret');
    assert.ok(!verifies(secret1, r), 'after rotation a tool request still verified with the old secret');
  }
  console.log(`job 2: ${received.length - n1} tool request(s), verified with the rotated secret only`);
} finally {
  server.close();
}

// The official openai npm client against a real agentqd (tests/e2e/openai_sdk.sh): only baseURL
// and the key change. Chat Completions (sync, stream, tools), Responses in background mode
// (create -> poll -> retrieve, cancel, delete, input_items pages), function_call ->
// function_call_output via previous_response_id, stream + disconnect + resume (starting_after),
// OpenAI-shaped webhooks verified by client.webhooks.unwrap, Predicted Outputs (prediction: the same
// output, accepted_prediction_tokens in usage), and the SDK's error classes (400 with param, 401, 404, 429).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import OpenAI from 'openai';

const base = process.env.AGENTQ_URL;
const model = process.env.AGENTQ_MODEL_NAME;
let client, secret, toolServer, hookServer, toolUrl, hookUrl;
const hooks = [];

async function admin(method, path, body) {
  const r = await fetch(base + path, {
    method,
    headers: { authorization: `Bearer ${process.env.AGENTQ_ADMIN_KEY}`, 'content-type': 'application/json' },
    body: body ? JSON.stringify(body) : undefined,
  });
  return r.json();
}

function listen(handler) {
  return new Promise((resolve) => {
    const s = http.createServer(handler);
    s.listen(0, '127.0.0.1', () => resolve(s));
  });
}

const weather = {
  type: 'function',
  name: 'get_weather',
  description: 'weather for a city',
    // an enum keeps the tiny model's constrained call short (a free string may run to max tokens)
  parameters: { type: 'object', properties: { city: { type: 'string', enum: ['Oslo', 'Paris'] } }, required: ['city'], additionalProperties: false },
  strict: true,
};
const weatherChat = { type: 'function', function: { name: weather.name, description: weather.description, parameters: weather.parameters } };

before(async () => {
  const k = await admin('POST', '/v1/keys', { tenant: 'openai-e2e' });
  secret = k.webhook_secret;
  client = new OpenAI({ apiKey: k.key, baseURL: base + '/v1', maxRetries: 0, timeout: 60000 });
  // a slow server-side tool keeps a response in_progress long enough to cancel it
  toolServer = await listen((req, res) => {
    setTimeout(() => { res.setHeader('content-type', 'application/json'); res.end('{"output":"slow"}'); }, 5000);
  });
  toolUrl = `http://127.0.0.1:${toolServer.address().port}/tool`;
  hookServer = await listen((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => { hooks.push({ body, headers: req.headers }); res.end('ok'); });
  });
  hookUrl = `http://127.0.0.1:${hookServer.address().port}/hook`;
});

after(() => { toolServer?.close(); hookServer?.close(); });

async function settle(id) {
  for (let i = 0; i < 600; i++) {
    const r = await client.responses.retrieve(id);
    if (!['queued', 'in_progress'].includes(r.status)) return r;
    await new Promise((ok) => setTimeout(ok, 100));
  }
  throw new Error(`response ${id} did not settle`);
}

test('chat completions: sync', async () => {
  const c = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: 24, seed: 1, n: 1 });
  assert.equal(c.object, 'chat.completion');
  assert.match(c.id, /^chatcmpl-/);
  assert.equal(typeof c.choices[0].message.content, 'string');
  assert.ok(['stop', 'length'].includes(c.choices[0].finish_reason));
  assert.ok(c.usage.prompt_tokens > 0 && c.usage.completion_tokens > 0);
  assert.equal(typeof c.usage.prompt_tokens_details.cached_tokens, 'number');
});

test('chat completions: stream with usage', async () => {
  const stream = await client.chat.completions.create({
    model, messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: 24, stream: true, stream_options: { include_usage: true },
  });
  let text = '', finish = null, usage = null, n = 0;
  for await (const chunk of stream) {
    n++;
    assert.equal(chunk.object, 'chat.completion.chunk');
    if (chunk.usage) usage = chunk.usage;
    if (chunk.choices.length) {
      text += chunk.choices[0].delta.content ?? '';
      finish = chunk.choices[0].finish_reason ?? finish;
    }
  }
  assert.ok(n >= 3);
  assert.ok(text.length > 0);
  assert.ok(['stop', 'length'].includes(finish));
  assert.ok(usage && usage.completion_tokens > 0);
});

test('chat completions: tools, sync and streamed deltas', async () => {
  const req = { model, messages: [{ role: 'user', content: 'weather in Oslo?' }], tools: [weatherChat],
                tool_choice: { type: 'function', function: { name: 'get_weather' } }, max_tokens: 200 };
  const c = await client.chat.completions.create(req);
  assert.equal(c.choices[0].finish_reason, 'tool_calls');
  const call = c.choices[0].message.tool_calls[0];
  assert.equal(call.function.name, 'get_weather');
  assert.equal(typeof JSON.parse(call.function.arguments).city, 'string');
  // the SDK's stream helper assembles tool-call deltas into the final message
  const runner = client.chat.completions.stream({ ...req });
  const done = await runner.finalChatCompletion();
  const streamed = done.choices[0].message.tool_calls[0];
  assert.equal(streamed.function.name, 'get_weather');
  assert.equal(typeof JSON.parse(streamed.function.arguments).city, 'string');
  assert.equal(done.choices[0].finish_reason, 'tool_calls');
});

test('responses: background create -> poll -> retrieve, input_items pages, delete', async () => {
  const r = await client.responses.create({
    model, background: true, instructions: 'Tell a story.', max_output_tokens: 24, metadata: { case: 'bg' },
    input: [{ role: 'user', content: 'Once upon a time' }, { role: 'assistant', content: 'there was' }, { role: 'user', content: 'go on' }],
  });
  assert.equal(r.object, 'response');
  assert.match(r.id, /^resp_/);
  assert.ok(['queued', 'in_progress'].includes(r.status));
  assert.equal(r.background, true);
  const done = await settle(r.id);
  assert.ok(['completed', 'incomplete'].includes(done.status), done.status);
  if (done.status === 'incomplete') assert.equal(done.incomplete_details.reason, 'max_output_tokens');
  assert.equal(done.output[0].type, 'message');
  assert.equal(done.output[0].content[0].type, 'output_text');
  assert.equal(done.output_text, done.output[0].content[0].text);
  assert.equal(typeof done.usage.input_tokens_details.cached_tokens, 'number');
  assert.equal(done.usage.total_tokens, done.usage.input_tokens + done.usage.output_tokens);
  assert.deepEqual(done.metadata, { case: 'bg' });
  const page = await client.responses.inputItems.list(r.id, { limit: 2, order: 'asc' });
  assert.equal(page.data.length, 2);
  assert.equal(page.has_more, true);
  const all = [];
  for await (const item of client.responses.inputItems.list(r.id, { limit: 1, order: 'asc' })) all.push(item);
  assert.deepEqual(all.map((i) => i.role), ['user', 'assistant', 'user']);
  // delete: #33's deletion (a tombstone): every route of the response and of its job 404s
  const del = await client.responses.delete(r.id);
  assert.deepEqual(del, { id: r.id, object: 'response', deleted: true });
  await assert.rejects(client.responses.retrieve(r.id), OpenAI.NotFoundError);
  await assert.rejects(client.responses.inputItems.list(r.id), OpenAI.NotFoundError);
  await assert.rejects(client.responses.delete(r.id), OpenAI.NotFoundError);
  await assert.rejects(client.responses.create({ model, previous_response_id: r.id, input: 'more' }), OpenAI.NotFoundError);
  const job = await fetch(`${base}/v1/jobs/job_${r.id.slice(5)}`, { headers: { authorization: `Bearer ${client.apiKey}` } });
  assert.equal(job.status, 404);
  const events = await fetch(`${base}/v1/jobs/job_${r.id.slice(5)}/events`, { headers: { authorization: `Bearer ${client.apiKey}` } });
  assert.equal(events.status, 404);
});

test('responses: cancel a background response', async () => {
  const r = await client.responses.create({
    model, background: true, input: 'weather?', max_output_tokens: 200,
    tools: [{ ...weather, execution: { type: 'http', url: toolUrl, timeout_ms: 20000 } }],
    tool_choice: { type: 'function', name: 'get_weather' },
  });
  for (let i = 0; i < 100; i++) {
    const cur = await client.responses.retrieve(r.id);
    if (cur.status === 'in_progress') break;
    await new Promise((ok) => setTimeout(ok, 50));
  }
  const c = await client.responses.cancel(r.id);
  assert.equal(c.status, 'cancelled');
  assert.equal((await client.responses.retrieve(r.id)).status, 'cancelled');
  await assert.rejects(client.responses.cancel('resp_000000000000000000000000'), OpenAI.NotFoundError);
});

test('responses: function_call -> function_call_output via previous_response_id', async () => {
  // NOTE: a user message no other request shares (random words, several 64-token KV blocks), so
  // only the KV the first response kept (--response-kv-ttl-s) can serve the continuation's
  // cached_tokens past its first response's prompt: a shared-prefix hit stops at the tool schema.
  const words = ['red', 'blue', 'cat', 'dog', 'sun', 'tree', 'boat', 'hill', 'cake', 'bird', 'moon', 'fish'];
  const unique = Array.from({ length: 48 }, () => words[Math.floor(Math.random() * words.length)]).join(' ');
  const r1 = await client.responses.create({
    model, input: `${unique}. What is the weather in Oslo?`, tools: [weather],
    tool_choice: { type: 'function', name: 'get_weather' }, max_output_tokens: 200,
  });
  assert.equal(r1.status, 'completed');
  const call = r1.output.find((o) => o.type === 'function_call');
  assert.ok(call, JSON.stringify(r1.output));
  assert.equal(call.name, 'get_weather');
  assert.match(call.call_id, /^call_/);
  const r2 = await client.responses.create({
    model, previous_response_id: r1.id, tools: [weather], max_output_tokens: 16,
    input: [{ type: 'function_call_output', call_id: call.call_id, output: '{"temp_c": 3}' }],
  });
  assert.ok(['completed', 'incomplete'].includes(r2.status), r2.status);
  assert.equal(r2.previous_response_id, r1.id);
  assert.ok(r2.usage.input_tokens > r1.usage.input_tokens);
  const cached = r2.usage.input_tokens_details.cached_tokens;
  const whole = r1.usage.input_tokens + r1.usage.output_tokens;
  console.log(`# previous_response_id: r1 input ${r1.usage.input_tokens} + output ${r1.usage.output_tokens} = ${whole}; ` +
              `r2 input ${r2.usage.input_tokens}, cached ${cached}`);
  // NOTE: the continuation restores r1's parked KV (its chain's KV key), and the engine keeps the
  // KV's token ids wherever their bytes spell the new prompt (engine/tokenizer/splice.cpp), so r1's
  // prompt and its sampled reply are both reused: only the new function_call_output and its turn
  // markers are computed (measured: cached 552 of r2 input 579). Less than one 64-token block new;
  // a shared-prefix hit would stop at the tool schema, far below this.
  assert.ok(cached >= r1.usage.input_tokens, `cached ${cached} < r1 input ${r1.usage.input_tokens}`);
  assert.ok(cached >= r2.usage.input_tokens - 64,
            `cached ${cached}: more than one block of r2's ${r2.usage.input_tokens} input tokens computed`);
  const items = await client.responses.inputItems.list(r2.id);
  assert.equal(items.data[0].type, 'function_call_output');
  // an output for a call the chain never made is refused, naming the field
  await assert.rejects(
    client.responses.create({ model, previous_response_id: r1.id, tools: [weather], input: [{ type: 'function_call_output', call_id: 'call_nope', output: 'x' }] }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400);
});

test('responses: stream, disconnect, resume with starting_after', async () => {
  const stream = await client.responses.create({ model, input: 'Once upon a time', stream: true, background: true, max_output_tokens: 32 });
  const first = [];
  let id = null;
  for await (const ev of stream) {
    first.push(ev);
    if (ev.type === 'response.created') id = ev.response.id;
    if (first.length === 4) break;  // disconnect mid-stream
  }
  assert.equal(first[0].type, 'response.created');
  first.forEach((ev, i) => assert.equal(ev.sequence_number, i));
  const resumed = await client.responses.retrieve(id, { stream: true, starting_after: 3 });
  const rest = [];
  for await (const ev of resumed) rest.push(ev);
  assert.equal(rest[0].sequence_number, 4);
  rest.forEach((ev, i) => assert.equal(ev.sequence_number, 4 + i));
  const last = rest[rest.length - 1];
  assert.ok(['response.completed', 'response.incomplete'].includes(last.type), last.type);
  const text = [...first, ...rest].filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta).join('');
  assert.equal(text, last.response.output_text);
});

test('responses: streamed function call arguments match the final items', async () => {
  const stream = await client.responses.create({
    model, input: 'weather?', stream: true, tools: [weather], tool_choice: { type: 'function', name: 'get_weather' }, max_output_tokens: 200,
  });
  const args = {}, done = {};
  let final = null;
  for await (const ev of stream) {
    if (ev.type === 'response.function_call_arguments.delta') args[ev.item_id] = (args[ev.item_id] ?? '') + ev.delta;
    if (ev.type === 'response.function_call_arguments.done') done[ev.item_id] = ev.arguments;
    if (ev.type === 'response.completed') final = ev.response;
  }
  const calls = final.output.filter((o) => o.type === 'function_call');
  assert.ok(calls.length >= 1);
  for (const c of calls) {
    assert.equal(args[c.id], c.arguments);
    assert.equal(done[c.id], c.arguments);
    assert.equal(JSON.parse(c.arguments).city.length > 0, true);
  }
});

test('webhook endpoints: response.completed signed for client.webhooks.unwrap', async () => {
  const ep = await fetch(base + '/v1/webhook_endpoints', {
    method: 'POST', headers: { authorization: `Bearer ${client.apiKey}`, 'content-type': 'application/json' },
    body: JSON.stringify({ url: hookUrl, events: ['response.completed', 'response.incomplete'] }),
  }).then((r) => r.json());
  assert.match(ep.id, /^we_/);
  const r = await client.responses.create({ model, input: 'Once upon a time', background: true, max_output_tokens: 8 });
  await settle(r.id);
  let got = null;
  for (let i = 0; i < 200 && !got; i++) {
    got = hooks.find((h) => JSON.parse(h.body).data.id === r.id);
    if (!got) await new Promise((ok) => setTimeout(ok, 100));
  }
  assert.ok(got, 'no webhook for ' + r.id);
  const event = await client.webhooks.unwrap(got.body, got.headers, secret);
  assert.equal(event.object, 'event');
  assert.ok(['response.completed', 'response.incomplete'].includes(event.type));
  assert.equal(event.data.id, r.id);
  await assert.rejects(async () => client.webhooks.unwrap(got.body, got.headers, 'whsec_' + Buffer.from('wrong-secret-wrong-secret').toString('base64')));
  const list = await fetch(base + '/v1/webhook_endpoints', { headers: { authorization: `Bearer ${client.apiKey}` } }).then((x) => x.json());
  assert.ok(list.data.some((e) => e.id === ep.id));
  const gone = await fetch(base + '/v1/webhook_endpoints/' + ep.id, { method: 'DELETE', headers: { authorization: `Bearer ${client.apiKey}` } });
  assert.equal(gone.status, 200);
});

test('chat completions and responses: Predicted Outputs give the same text, faster', async () => {
  const messages = [{ role: 'user', content: 'Once upon a time' }];
  const plain = await client.chat.completions.create({ model, messages, max_tokens: 64, temperature: 0 });
  const text = plain.choices[0].message.content;
  assert.ok(text.length > 0);
  // an agent editing a file passes the file: here the answer itself, as a string and as text parts
  for (const content of [text, [{ type: 'text', text }]]) {
    const c = await client.chat.completions.create({ model, messages, max_tokens: 64, temperature: 0,
      prediction: { type: 'content', content } });
    assert.equal(c.choices[0].message.content, text);
    const d = c.usage.completion_tokens_details;
    console.log(`# prediction: accepted ${d.accepted_prediction_tokens}, rejected ${d.rejected_prediction_tokens} of ${c.usage.completion_tokens}`);
    assert.ok(d.accepted_prediction_tokens > 0, JSON.stringify(c.usage));
    assert.equal(typeof d.rejected_prediction_tokens, 'number');
  }
  // streamed: the usage chunk carries the counters too
  const stream = await client.chat.completions.create({ model, messages, max_tokens: 64, temperature: 0,
    prediction: { type: 'content', content: text }, stream: true, stream_options: { include_usage: true } });
  let streamed = '', usage = null;
  for await (const chunk of stream) {
    if (chunk.choices[0]?.delta?.content) streamed += chunk.choices[0].delta.content;
    if (chunk.usage) usage = chunk.usage;
  }
  assert.equal(streamed, text);
  assert.ok(usage.completion_tokens_details.accepted_prediction_tokens > 0);
  // Responses (an agentq extension there): the same field, counters in output_tokens_details
  const r0 = await client.responses.create({ model, input: 'Once upon a time', max_output_tokens: 64, temperature: 0 });
  const r1 = await client.responses.create({ model, input: 'Once upon a time', max_output_tokens: 64, temperature: 0,
    prediction: { type: 'content', content: r0.output_text } });
  assert.equal(r1.output_text, r0.output_text);
  assert.ok(r1.usage.output_tokens_details.accepted_prediction_tokens > 0, JSON.stringify(r1.usage));
  // the job behind it: usage summed over turns, and a speculation mark per turn in the timeline
  const auth = { headers: { authorization: `Bearer ${client.apiKey}` } };
  const jobId = 'job_' + r1.id.slice('resp_'.length);
  const job = await fetch(`${base}/v1/jobs/${jobId}`, auth).then((x) => x.json());
  assert.equal(job.usage.completion_tokens_details.accepted_prediction_tokens,
    r1.usage.output_tokens_details.accepted_prediction_tokens, JSON.stringify(job.usage));
  const tl = await fetch(`${base}/v1/jobs/${jobId}/timeline`, auth).then((x) => x.json());
  const mark = tl.marks.find((m) => m.kind === 'speculation');
  assert.ok(mark && mark.attrs.accepted_prediction_tokens > 0, JSON.stringify(tl.marks));
  // a wrong shape is a 400 naming the field
  await assert.rejects(client.chat.completions.create({ model, messages, prediction: 'text' }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'prediction');
  await assert.rejects(client.chat.completions.create({ model, messages, prediction: { type: 'file', content: 'x' } }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'prediction.type');
  await assert.rejects(client.responses.create({ model, input: 'hi', prediction: { type: 'content', content: 7 } }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'prediction.content');
});

test('SDK error classes: 400 names the field, 401, 404', async () => {
  await assert.rejects(client.chat.completions.create({ model, messages: [{ role: 'user', content: 'hi' }], logprobs: true }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'logprobs');
  await assert.rejects(client.responses.create({ model, input: 'hi', reasoning: { effort: 'low' } }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'reasoning');
  await assert.rejects(client.chat.completions.create({ model, messages: [{ role: 'user', content: 'hi' }], n: 2 }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'n');
  const bad = new OpenAI({ apiKey: 'aq_wrong', baseURL: base + '/v1', maxRetries: 0 });
  await assert.rejects(bad.responses.create({ model, input: 'hi' }), OpenAI.AuthenticationError);
  await assert.rejects(client.responses.retrieve('resp_0123456789abcdef01234567'), OpenAI.NotFoundError);
  const models = await client.models.list();
  assert.ok(models.data.some((m) => m.id === model));
});

test('SDK error classes: 429 past the key\'s rate limit (openai_sdk.sh sets --rate-limit)', async () => {
  const k = await admin('POST', '/v1/keys', { tenant: 'openai-e2e-429' });
  const burst = new OpenAI({ apiKey: k.key, baseURL: base + '/v1', maxRetries: 0 });
  const results = await Promise.allSettled(Array.from({ length: 400 }, () => burst.models.list()));
  const limited = results.filter((r) => r.status === 'rejected');
  assert.ok(limited.length > 0, 'no request was rate limited');
  for (const r of limited) assert.ok(r.reason instanceof OpenAI.RateLimitError, String(r.reason));
});

// Resume a Responses event stream across an agentqd restart (tests/e2e/openai_sdk.sh): phase
// "start" streams a background response, stops reading after a few events and saves the id and
// the events seen; agentqd is restarted on the same data dir; phase "resume" reconnects with
// starting_after and checks that the events continue with the next sequence_number and that the
// replayed prefix is identical to what was seen before the restart.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import OpenAI from 'openai';

const [phase, stateFile] = process.argv.slice(2);
const client = new OpenAI({ apiKey: process.env.AGENTQ_API_KEY, baseURL: process.env.AGENTQ_URL + '/v1', maxRetries: 0 });
const model = process.env.AGENTQ_MODEL_NAME;

if (phase === 'start') {
  const stream = await client.responses.create({ model, input: 'Once upon a time', stream: true, background: true, max_output_tokens: 64 });
  const seen = [];
  for await (const ev of stream) {
    seen.push(ev);
    if (seen.length === 5) break;
  }
  fs.writeFileSync(stateFile, JSON.stringify({ id: seen[0].response.id, seen }));
} else {
  const { id, seen } = JSON.parse(fs.readFileSync(stateFile, 'utf8'));
  const last = seen[seen.length - 1].sequence_number;
  const rest = [];
  for await (const ev of await client.responses.retrieve(id, { stream: true, starting_after: last })) rest.push(ev);
  assert.equal(rest[0].sequence_number, last + 1);
  rest.forEach((ev, i) => assert.equal(ev.sequence_number, last + 1 + i));
  assert.ok(['response.completed', 'response.incomplete'].includes(rest.at(-1).type), rest.at(-1).type);
  // the full replay agrees with what the client saw before the restart (snapshots aside)
  const all = [];
  for await (const ev of await client.responses.retrieve(id, { stream: true })) all.push(ev);
  assert.deepEqual(all.slice(0, seen.length).map((e) => [e.type, e.sequence_number, e.delta ?? null]),
                   seen.map((e) => [e.type, e.sequence_number, e.delta ?? null]));
  assert.equal(all.length, seen.length + rest.length);
  console.log(`resumed ${id} after restart at sequence_number ${last}: ${rest.length} more events`);
}

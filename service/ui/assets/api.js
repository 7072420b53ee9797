// Talking to agentqd: the API key (sessionStorage, sent only as a Bearer header), JSON requests,
// and live event streams read with fetch() (resumed with Last-Event-ID after a drop).
import { SseParser } from './sse.js';

const KEY_NAME = 'agentq.api_key';

export function getKey() { return sessionStorage.getItem(KEY_NAME) || ''; }
export function setKey(key) { sessionStorage.setItem(KEY_NAME, key); }
export function forgetKey() { sessionStorage.removeItem(KEY_NAME); }

// An HTTP error with the server's {"error":{"type","message","param"}} when it sent one.
export class ApiError extends Error {
  constructor(status, body) {
    super((body && body.error && body.error.message) || `HTTP ${status}`);
    this.status = status;
    this.body = body;
  }
}

// Listeners for "the key was refused" (app.js shows the key form).
const unauthorizedListeners = [];
export function onUnauthorized(fn) { unauthorizedListeners.push(fn); }
function unauthorized() { for (const fn of unauthorizedListeners) fn(); }

function authHeaders(extra = {}) {
  return { Authorization: `Bearer ${getKey()}`, ...extra };
}

// GET/POST a JSON API path; resolves to the parsed body, rejects with ApiError.
export async function api(path, { method = 'GET', body, signal } = {}) {
  const headers = authHeaders(body !== undefined ? { 'Content-Type': 'application/json' } : {});
  const res = await fetch(path, { method, headers, signal, body: body !== undefined ? JSON.stringify(body) : undefined });
  let parsed = null;
  try { parsed = await res.json(); } catch { parsed = null; }
  if (!res.ok) {
    if (res.status === 401) unauthorized();
    throw new ApiError(res.status, parsed);
  }
  return parsed;
}

// Follow an SSE path. onEvent(type, data, id); onState('live'|'reconnecting'|'ended'|'unavailable'|'error').
// reconnect: after the server ends the stream (false for a job's stream, which ends at a terminal state).
// Returns {close()}.
export function followEvents(path, { onEvent, onState = () => {}, reconnect = true }) {
  const controller = new AbortController();
  let lastId = null;
  let delayMs = 500;
  let closed = false;

  async function once() {
    const headers = authHeaders({ Accept: 'text/event-stream' });
    if (lastId !== null) headers['Last-Event-ID'] = lastId;
    const res = await fetch(path, { headers, signal: controller.signal, cache: 'no-store' });
    if (!res.ok) {
      if (res.status === 401) unauthorized();
      return res.status === 404 || res.status === 401 ? 'unavailable' : 'retry';
    }
    onState('live');
    delayMs = 500;
    const parser = new SseParser((e) => {
      lastId = e.id;
      let data = null;
      try { data = JSON.parse(e.data); } catch { data = e.data; }
      onEvent(e.event, data, e.id);
    });
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      parser.push(value);
    }
    return 'ended';
  }

  (async () => {
    while (!closed) {
      let outcome;
      try {
        outcome = await once();
      } catch (err) {
        if (closed) return;
        outcome = 'retry';
      }
      if (closed) return;
      if (outcome === 'unavailable') return onState('unavailable');
      if (outcome === 'ended' && !reconnect) return onState('ended');
      onState('reconnecting');
      await new Promise((r) => setTimeout(r, delayMs));
      delayMs = Math.min(delayMs * 2, 10000);
    }
  })();

  return { close() { closed = true; controller.abort(); } };
}

// Workers page (#/workers, admin key): the fleet as GET /v1/workers reports it (each worker's
// Redis heartbeat advert): models, device (and its sharing between a process's models), running
// jobs, KV blocks, version; polled every 2 s.
import { api } from './api.js';
import { h, clear, fmtNum, fmtClock, unavailable } from './dom.js';

function models(w) {
  return (w.models || []).map((m) => `${m.name} (${m.arch}, ctx ${m.context_length}, ${m.chat_family})`).join(', ');
}

// The device and how the process shares it between its models (worker/model_share.h).
function device(w) {
  const s = w.share;
  if (!s || !s.models || s.models < 2) return w.device || '';
  return `${w.device || ''} (shared by ${s.models} models: ${s.threads_each} threads, ${s.kv_budget_mb_each} MiB KV each)`;
}

function table(workers) {
  const head = ['worker', 'host', 'version', 'device', 'models', 'running', 'free', 'KV used / total', 'heartbeat'];
  return h('table', { class: 'workers' },
    h('thead', {}, h('tr', {}, head.map((c) => h('th', {}, c)))),
    h('tbody', {}, workers.map((w) => {
      const kv = w.kv || {};
      return h('tr', {},
        h('td', { class: 'mono' }, w.id),
        h('td', {}, `${w.host || ''}${w.pid ? ` (pid ${w.pid})` : ''}`),
        h('td', {}, `${w.version || '?'} / protocol ${w.protocol ?? '?'}`),
        h('td', {}, device(w)),
        h('td', {}, models(w)),
        h('td', { class: 'num' }, `${fmtNum(w.running_jobs)} / ${fmtNum(w.max_jobs)}`),
        h('td', { class: 'num' }, fmtNum(w.free_slots)),
        h('td', { class: 'num' }, `${fmtNum(kv.blocks_used)} / ${fmtNum(kv.blocks_total)}`),
        h('td', {}, w.last_heartbeat_ms ? `${fmtClock(w.last_heartbeat_ms)} (${fmtNum((w.heartbeat_age_ms || 0) / 1000, 1)} s ago)` : '—'));
    })));
}

export function mountWorkers(root) {
  const body = h('div', {}, h('p', { class: 'muted' }, 'loading…'));
  const stamp = h('span', { class: 'muted' });
  root.append(h('h1', {}, 'Workers'), h('div', { class: 'filters' }, stamp), body);
  let timer = null;
  let stopped = false;
  async function poll() {
    clearTimeout(timer);
    let res;
    try {
      res = await api('/v1/workers');
    } catch (e) {
      clear(body);
      body.append(h('div', { class: 'card' }, e.status === 403
        ? h('p', { class: 'muted unavailable' }, 'The worker list needs an admin key.')
        : unavailable('Workers', e)));
      if (!stopped && e.status !== 404 && e.status !== 403) timer = setTimeout(poll, 5000);
      return;
    }
    if (stopped) return;
    const workers = res.data || [];
    clear(body);
    body.append(h('div', { class: 'card' }, workers.length
      ? table(workers)
      : h('p', { class: 'muted' }, 'No live worker (none has sent a heartbeat recently).')));
    stamp.textContent = `${workers.length} live · updated ${fmtClock(Date.now())}`;
    timer = setTimeout(poll, 2000);
  }
  poll();
  return () => { stopped = true; clearTimeout(timer); };
}

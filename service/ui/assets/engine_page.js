// Engine page (#/engine): per-worker throughput, batch size and KV block usage over time,
// polled from GET /v1/engine/stats every 2 s and drawn as SVG line charts.
import { api } from './api.js';
import { h, clear, fmtNum, fmtClock, unavailable } from './dom.js';
import { lineChart } from './charts.js';

const WINDOWS = [[5, '5 min'], [15, '15 min'], [60, '1 hour']];

function series(workers, fields) {
  const out = [];
  let cls = 0;
  for (const w of workers) {
    for (const [field, label, dashed] of fields) {
      out.push({
        label: workers.length > 1 ? `${w.worker_id} ${label}` : label,
        cls: `s${cls++ % 8}`,
        dashed,
        points: (w.samples || []).map((sm) => [sm.at_ms, sm[field]]),
      });
    }
  }
  return out;
}

function latestTable(workers) {
  const cols = [['tokens_per_s', 'gen tok/s', 1], ['prompt_tokens_per_s', 'prompt tok/s', 1], ['batch_size', 'batch', 0],
    ['running', 'running', 0], ['waiting', 'waiting', 0], ['kv_blocks_used', 'KV used', 0], ['kv_blocks_total', 'KV total', 0],
    ['kv_blocks_parked', 'parked', 0], ['kv_blocks_spilled', 'spilled', 0], ['prefix_hit_rate', 'prefix hit', 2]];
  return h('table', { class: 'workers' },
    h('thead', {}, h('tr', {}, h('th', {}, 'worker'), h('th', {}, 'last sample'), cols.map(([, l]) => h('th', {}, l)))),
    h('tbody', {}, workers.map((w) => {
      const last = (w.samples || [])[w.samples.length - 1] || {};
      return h('tr', {}, h('td', { class: 'mono' }, w.worker_id), h('td', {}, last.at_ms ? fmtClock(last.at_ms) : '—'),
        cols.map(([f, , d]) => h('td', { class: 'num' }, fmtNum(last[f], d))));
    })));
}

export function mountEngine(root) {
  let windowMin = 15;
  const body = h('div', {}, h('p', { class: 'muted' }, 'loading…'));
  const stamp = h('span', { class: 'muted' });
  const sel = h('select', { name: 'window', onchange: (e) => { windowMin = Number(e.target.value); poll(); } },
    WINDOWS.map(([m, l]) => h('option', { value: m, selected: m === windowMin }, l)));
  root.append(h('h1', {}, 'Engine'), h('div', { class: 'filters' }, h('label', {}, 'Window ', sel), stamp), body);

  let timer = null;
  let stopped = false;
  async function poll() {
    clearTimeout(timer);
    const since = Date.now() - windowMin * 60000;
    let stats;
    try {
      stats = await api(`/v1/engine/stats?since_ms=${Math.floor(since)}`);
    } catch (e) {
      clear(body);
      body.append(h('div', { class: 'card' }, unavailable('Engine stats', e)));
      if (!stopped && e.status !== 404) timer = setTimeout(poll, 5000);
      return;
    }
    if (stopped) return;
    const workers = stats.workers || [];
    const now = stats.now_ms || Date.now();
    // NOTE: the x axis starts at the window's start or a little before the oldest sample, whichever
    // is later, so a server that just started shows its few samples across the chart.
    let oldest = now;
    for (const w of workers) if (w.samples && w.samples.length) oldest = Math.min(oldest, w.samples[0].at_ms);
    const xDomain = [Math.max(now - windowMin * 60000, oldest - 10000), now];
    clear(body);
    if (!workers.length) {
      body.append(h('div', { class: 'card' }, h('p', { class: 'muted' }, 'No worker has reported engine samples in this window.')));
    } else {
      body.append(h('div', { class: 'card' }, h('h2', {}, 'Workers (latest sample)'), latestTable(workers)),
        h('div', { class: 'card' }, lineChart({
          title: 'Throughput (tokens/s)', xDomain, yFormat: (v) => fmtNum(v, 1),
          series: series(workers, [['tokens_per_s', 'generated'], ['prompt_tokens_per_s', 'prompt', true]]),
        })),
        h('div', { class: 'card' }, lineChart({
          title: 'Batch', xDomain, yFormat: (v) => fmtNum(v, 2),
          series: series(workers, [['batch_size', 'batch size'], ['running', 'running', true], ['waiting', 'waiting']]),
        })),
        h('div', { class: 'card' }, lineChart({
          title: 'KV cache (blocks)', xDomain, yFormat: (v) => fmtNum(v),
          series: series(workers, [['kv_blocks_used', 'used'], ['kv_blocks_total', 'total', true],
            ['kv_blocks_parked', 'parked'], ['kv_blocks_spilled', 'spilled']]),
        })),
        h('div', { class: 'card' }, lineChart({
          title: 'Prefix cache hit rate', xDomain, yFormat: (v) => fmtNum(v, 2),
          series: series(workers, [['prefix_hit_rate', 'hit rate']]),
        })));
    }
    stamp.textContent = `updated ${fmtClock(now)}`;
    timer = setTimeout(poll, 2000);
  }
  poll();
  return () => { stopped = true; clearTimeout(timer); };
}

// Jobs page (#/jobs): the tenant's jobs with status and metadata filters, a small submit form,
// and live updates from the tenant-wide stream GET /v1/events.
import { api, followEvents } from './api.js';
import { h, clear, statusBadge, fmtTime, fmtMs, fmtNum } from './dom.js';

const STATUSES = ['queued', 'running', 'requires_action', 'completed', 'failed', 'cancelled', 'incomplete'];

// "k=v, k2=v2" -> [[k, v], ...]; bad parts are ignored.
function parseMeta(text) {
  return (text || '').split(',').map((p) => p.trim()).filter((p) => p.includes('='))
    .map((p) => [p.slice(0, p.indexOf('=')).trim(), p.slice(p.indexOf('=') + 1).trim()]).filter(([k]) => k);
}

function listPath(filters, cursor) {
  const q = new URLSearchParams({ limit: '50' });
  if (filters.status) q.set('status', filters.status);
  for (const [k, v] of parseMeta(filters.meta)) q.append(`metadata.${k}`, v);
  if (cursor) q.set('after', cursor);
  return `/v1/jobs?${q}`;
}

function jobRow(job) {
  const u = job.usage || {};
  return h('tr', { 'data-job-id': job.id, 'data-status': job.status },
    h('td', {}, h('a', { href: `#/jobs/${encodeURIComponent(job.id)}`, class: 'mono' }, job.id)),
    h('td', {}, statusBadge(job.status)),
    h('td', {}, job.model),
    h('td', {}, Object.entries(job.metadata || {}).map(([k, v]) => h('span', { class: 'chip' }, `${k}=${v}`))),
    h('td', {}, fmtTime(job.created_at)),
    h('td', { class: 'num' }, fmtMs(job.timings && (job.timings.total_ms ?? null))),
    h('td', { class: 'num' }, fmtNum(job.n_turns)),
    h('td', { class: 'num' }, `${fmtNum(u.prompt_tokens)} / ${fmtNum(u.cached_tokens)} / ${fmtNum(u.completion_tokens)}`));
}

function submitForm(onSubmitted) {
  const model = h('select', { name: 'model', required: true });
  const prompt = h('textarea', { name: 'prompt', rows: 2, required: true, placeholder: 'Once upon a time' });
  const maxTokens = h('input', { name: 'max_tokens', type: 'number', min: 1, value: 32 });
  const metaInput = h('input', { name: 'metadata', placeholder: 'source=dashboard', value: 'source=dashboard' });
  const msg = h('span', { class: 'muted' });
  api('/v1/models').then((r) => {
    for (const m of r.data) model.append(h('option', { value: m.id }, m.id));
  }).catch((e) => { msg.textContent = `models: ${e.message}`; });
  const form = h('form', {
    class: 'submit-form',
    onsubmit: async (ev) => {
      ev.preventDefault();
      msg.textContent = 'submitting…';
      try {
        const job = await api('/v1/jobs', {
          method: 'POST',
          body: {
            model: model.value,
            messages: [{ role: 'user', content: prompt.value }],
            max_turns: 1,
            max_tokens_per_turn: Number(maxTokens.value) || 32,
            metadata: Object.fromEntries(parseMeta(metaInput.value)),
          },
        });
        msg.textContent = `submitted ${job.id}`;
        onSubmitted(job);
      } catch (e) {
        msg.textContent = `error: ${e.message}`;
      }
    },
  }, h('label', {}, 'Model ', model), h('label', { class: 'grow' }, 'Prompt ', prompt),
  h('label', {}, 'Max tokens ', maxTokens), h('label', {}, 'Metadata ', metaInput),
  h('button', { type: 'submit' }, 'Submit job'), msg);
  return h('details', { class: 'card' }, h('summary', {}, 'Submit a job'), form);
}

export function mountJobs(root, params) {
  const filters = { status: params.get('status') || '', meta: params.get('meta') || '' };
  const tbody = h('tbody', {});
  const more = h('button', { type: 'button', hidden: true }, 'Load more');
  const live = h('span', { class: 'live', 'data-state': 'connecting' }, 'connecting…');
  const errorLine = h('p', { class: 'error', hidden: true });
  let cursor = null;
  let pending = null;

  async function load(append) {
    try {
      const page = await api(listPath(filters, append ? cursor : null));
      if (!append) clear(tbody);
      for (const job of page.data) tbody.append(jobRow(job));
      cursor = page.next_cursor;
      more.hidden = !page.has_more;
      errorLine.hidden = true;
      if (!tbody.firstChild) tbody.append(h('tr', {}, h('td', { colspan: 8, class: 'muted' }, 'No jobs match.')));
    } catch (e) {
      errorLine.textContent = `Could not list jobs: ${e.message}`;
      errorLine.hidden = false;
    }
  }
  // NOTE: events arrive in bursts (a turn writes several); one list refresh per 300 ms is enough.
  function refreshSoon() {
    if (pending) return;
    pending = setTimeout(() => { pending = null; load(false); }, 300);
  }

  function applyFilters() {
    const q = new URLSearchParams();
    if (filters.status) q.set('status', filters.status);
    if (filters.meta) q.set('meta', filters.meta);
    history.replaceState(null, '', `#/jobs${q.toString() ? `?${q}` : ''}`);
    load(false);
  }
  const statusSel = h('select', { name: 'status', onchange: (e) => { filters.status = e.target.value; applyFilters(); } },
    h('option', { value: '' }, 'any status'), STATUSES.map((st) => h('option', { value: st, selected: st === filters.status }, st)));
  const metaInput = h('input', { name: 'meta', placeholder: 'metadata: key=value, …', value: filters.meta });
  const filterForm = h('form', { class: 'filters', onsubmit: (e) => { e.preventDefault(); filters.meta = metaInput.value; applyFilters(); } },
    statusSel, metaInput, h('button', { type: 'submit' }, 'Filter'), live);
  more.addEventListener('click', () => load(true));

  root.append(h('h1', {}, 'Jobs'), submitForm(() => refreshSoon()), filterForm, errorLine,
    h('table', { class: 'jobs' },
      h('thead', {}, h('tr', {}, ['id', 'status', 'model', 'metadata', 'created', 'total', 'turns', 'tokens p / cached / out']
        .map((t) => h('th', {}, t)))), tbody), more);
  load(false);

  const states = { live: 'live', reconnecting: 'reconnecting…', unavailable: 'live updates not available', ended: 'stream ended' };
  const stream = followEvents('/v1/events', {
    onEvent: (type) => { if (type === 'status' || type === 'turn') refreshSoon(); },
    onState: (st) => {
      live.dataset.state = st;
      live.textContent = states[st] || st;
      if (st === 'live') refreshSoon();  // catch up on what happened while disconnected
    },
  });
  return () => { stream.close(); clearTimeout(pending); };
}

// Job page (#/jobs/ID): status, usage, per-turn figures, the timeline chart
// (GET /v1/jobs/{id}/timeline), the transcript with tool calls and their results, and the job's
// live events (GET /v1/jobs/{id}/events, which ends when the job does).
import { api, followEvents } from './api.js';
import { h, clear, statusBadge, fmtTime, fmtMs, fmtNum, prettyJson, unavailable } from './dom.js';
import { timelineChart, timelineTable } from './charts.js';

const TERMINAL = ['completed', 'failed', 'cancelled', 'incomplete'];

function kv(pairs) {
  return h('dl', { class: 'kv' }, pairs.map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]));
}

function summary(job, onCancel) {
  const u = job.usage || {};
  const t = job.timings || {};
  return h('div', { class: 'grid3' },
    h('div', { class: 'card' }, h('h2', {}, 'Job'), kv([
      ['status', statusBadge(job.status)], ['model', job.model], ['priority', job.priority],
      ['metadata', Object.entries(job.metadata || {}).map(([k, v]) => h('span', { class: 'chip' }, `${k}=${v}`))],
      ['created', fmtTime(job.created_at)], ['started', fmtTime(job.started_at)], ['finished', fmtTime(job.finished_at)],
    ]), TERMINAL.includes(job.status) ? null : h('button', { type: 'button', class: 'danger', onclick: onCancel }, 'Cancel job')),
    h('div', { class: 'card' }, h('h2', {}, 'Usage'), kv([
      ['prompt tokens', fmtNum(u.prompt_tokens)], ['cached tokens', fmtNum(u.cached_tokens)],
      ['completion tokens', fmtNum(u.completion_tokens)], ['total tokens', fmtNum(u.total_tokens)], ['turns', fmtNum(job.n_turns)],
    ])),
    h('div', { class: 'card' }, h('h2', {}, 'Timings'), kv([
      ['queue', fmtMs(t.queue_ms)], ['run', fmtMs(t.run_ms)], ['total', fmtMs(t.total_ms)],
    ])));
}

function turnsTable(turns) {
  if (!turns || !turns.length) return h('p', { class: 'muted' }, 'No turns yet.');
  return h('table', { class: 'turns' },
    h('thead', {}, h('tr', {}, ['turn', 'prompt', 'cached', 'completion', 'prefill', 'decode', 'finish'].map((x) => h('th', {}, x)))),
    h('tbody', {}, turns.map((t) => h('tr', {},
      h('td', { class: 'num' }, t.turn), h('td', { class: 'num' }, fmtNum(t.usage.prompt_tokens)),
      h('td', { class: 'num' }, fmtNum(t.usage.cached_tokens)), h('td', { class: 'num' }, fmtNum(t.usage.completion_tokens)),
      h('td', { class: 'num' }, fmtMs(t.timings && t.timings.prefill_ms)), h('td', { class: 'num' }, fmtMs(t.timings && t.timings.decode_ms)),
      h('td', {}, t.finish_reason)))));
}

// Transcript messages; an assistant's tool calls are shown with their arguments and the
// tool message that answered each (matched by tool_call_id).
function transcript(messages, pending) {
  if (!messages || !messages.length) return h('p', { class: 'muted' }, 'No transcript yet.');
  const results = new Map();
  for (const m of messages) if (m.role === 'tool' && m.tool_call_id) results.set(m.tool_call_id, m);
  const pendingIds = new Set((pending || []).map((c) => c.id));
  return h('ol', { class: 'transcript' }, messages.filter((m) => !(m.role === 'tool' && m.tool_call_id)).map((m) =>
    h('li', { class: `msg role-${m.role}` },
      h('div', { class: 'msg-head' }, h('span', { class: 'role' }, m.role), m.turn !== undefined ? h('span', { class: 'muted' }, `turn ${m.turn}`) : null),
      m.content ? h('pre', { class: 'content' }, m.content) : null,
      (m.tool_calls || []).map((c) => {
        const fn = c.function || c;
        const r = results.get(c.id);
        return h('div', { class: 'tool-call', 'data-call-id': c.id },
          h('div', { class: 'msg-head' }, h('span', { class: 'role' }, 'tool call'), h('code', {}, fn.name), h('span', { class: 'muted mono' }, c.id)),
          h('pre', { class: 'args' }, prettyJson(fn.arguments ?? '')),
          r ? h('div', { class: 'tool-result' }, h('span', { class: 'muted' }, 'result'), h('pre', {}, prettyJson(r.content)))
            : h('p', { class: 'muted' }, pendingIds.has(c.id) ? 'waiting for tool output (requires_action)' : 'no result recorded'));
      }))));
}

export function mountJob(root, id) {
  const head = h('div', {});
  const timelineBox = h('div', { class: 'card', id: 'timeline' }, h('h2', {}, 'Timeline'), h('p', { class: 'muted' }, 'loading…'));
  const turnsBox = h('div', { class: 'card' });
  const transcriptBox = h('div', { class: 'card' });
  const outputBox = h('div', {});
  const eventsList = h('ol', { class: 'events' });
  const liveText = h('pre', { class: 'content live-text', hidden: true });
  const streamState = h('span', { class: 'live', 'data-state': 'connecting' }, 'connecting…');
  root.append(h('p', {}, h('a', { href: '#/jobs' }, '← Jobs')), h('h1', { class: 'mono' }, id), head, timelineBox,
    turnsBox, transcriptBox, outputBox,
    h('div', { class: 'card' }, h('h2', {}, 'Events ', streamState), liveText, eventsList));

  let job = null;
  let pending = null;
  let tick = null;

  async function cancel() {
    try { await api(`/v1/jobs/${encodeURIComponent(id)}/cancel`, { method: 'POST' }); } catch (e) { alert(e.message); }
    refresh();
  }

  async function loadTimeline() {
    const body = [h('h2', {}, 'Timeline')];
    try {
      const tl = await api(`/v1/jobs/${encodeURIComponent(id)}/timeline`);
      const spans = tl.spans || [];
      if (spans.length || (tl.marks || []).length) body.push(timelineChart(tl), timelineTable(tl));
      else body.push(h('p', { class: 'muted' }, 'No timeline entries yet.'));
    } catch (e) {
      body.push(unavailable('Timeline', e));
    }
    const wasOpen = timelineBox.querySelector('details.timeline-table[open]') !== null;
    clear(timelineBox);
    timelineBox.append(...body);
    if (wasOpen) timelineBox.querySelector('details.timeline-table')?.setAttribute('open', '');
  }

  async function refresh() {
    try {
      job = await api(`/v1/jobs/${encodeURIComponent(id)}`);
    } catch (e) {
      clear(head);
      head.append(h('p', { class: 'error' }, e.status === 404 ? `No job '${id}'.` : `Could not load the job: ${e.message}`));
      return;
    }
    clear(head); head.append(summary(job, cancel));
    clear(turnsBox); turnsBox.append(h('h2', {}, 'Turns'), turnsTable(job.turns));
    clear(transcriptBox); transcriptBox.append(h('h2', {}, 'Transcript'),
      transcript(job.transcript, job.required_action && job.required_action.tool_calls));
    clear(outputBox);
    if (job.output !== null) outputBox.append(h('div', { class: 'card' }, h('h2', {}, 'Output'), h('pre', { class: 'content' }, prettyJson(job.output))));
    if (job.error) outputBox.append(h('div', { class: 'card' }, h('h2', {}, 'Error'), h('pre', { class: 'error' }, job.error.message)));
    document.body.dataset.jobStatus = job.status;
    await loadTimeline();
    // open spans of a live job grow: redraw each second until it ends
    if (TERMINAL.includes(job.status)) { clearInterval(tick); tick = null; } else if (!tick) tick = setInterval(loadTimeline, 1000);
  }
  function refreshSoon() {
    if (pending) return;
    pending = setTimeout(() => { pending = null; refresh(); }, 200);
  }

  refresh();
  const stream = followEvents(`/v1/jobs/${encodeURIComponent(id)}/events`, {
    reconnect: false,
    onEvent: (type, data) => {
      if (type === 'token') {
        liveText.hidden = false;
        liveText.textContent += (data.data && data.data.text) || '';
        return;
      }
      eventsList.append(h('li', {}, h('span', { class: 'muted' }, fmtTime(data.created_at)), ' ', h('b', {}, type), ' ',
        h('code', {}, JSON.stringify(data.data))));
      refreshSoon();
    },
    onState: (st) => {
      streamState.dataset.state = st;
      streamState.textContent = { live: 'live', ended: 'ended (job finished)', reconnecting: 'reconnecting…', unavailable: 'not available' }[st] || st;
      if (st === 'ended') refreshSoon();
    },
  });
  return () => { stream.close(); clearTimeout(pending); clearInterval(tick); delete document.body.dataset.jobStatus; };
}

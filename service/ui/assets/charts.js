// SVG charts drawn in the page: time-series line charts (engine page) and a job's timeline
// (lanes of spans plus marks). Colours come from CSS classes (no inline styles; see the CSP).
import { h, s, fmtClock, fmtMs } from './dom.js';

// A "nice" upper bound for an axis: 1, 2, 2.5 or 5 times a power of ten, >= x.
function niceCeil(x) {
  if (!(x > 0)) return 1;
  const p = 10 ** Math.floor(Math.log10(x));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= x) return m * p;
  return 10 * p;
}

function legend(items) {
  return h('div', { class: 'legend' },
    items.map((it) => h('span', { class: 'legend-item' }, h('span', { class: `swatch ${it.cls}` }), it.label)));
}

// series: [{label, cls: 's0'..'s7', dashed, points: [[at_ms, value], ...]}] sorted by time.
// xDomain: [t0_ms, t1_ms]. Returns a <figure> with the SVG and a legend.
export function lineChart({ title, series, xDomain, yFormat = (v) => String(v), height = 160 }) {
  // NOTE: the view box is about as wide as the card, so text keeps its CSS size when scaled.
  const W = 1100, H = height, L = 56, R = 12, T = 10, B = 24;
  const [t0, t1] = xDomain;
  let yMax = 0;
  for (const se of series) for (const [, v] of se.points) if (v > yMax) yMax = v;
  yMax = niceCeil(yMax);
  const x = (t) => L + ((t - t0) / Math.max(1, t1 - t0)) * (W - L - R);
  const y = (v) => T + (1 - v / yMax) * (H - T - B);

  const svg = s('svg', { viewBox: `0 0 ${W} ${H}`, class: 'chart', role: 'img', 'aria-label': title });
  for (let i = 0; i <= 4; ++i) {
    const v = (yMax * i) / 4;
    svg.append(s('line', { x1: L, x2: W - R, y1: y(v), y2: y(v), class: 'grid' }),
      s('text', { x: L - 6, y: y(v) + 4, class: 'tick', 'text-anchor': 'end' }, yFormat(v)));
  }
  for (let i = 0; i <= 5; ++i) {
    const t = t0 + ((t1 - t0) * i) / 5;
    svg.append(s('text', { x: x(t), y: H - 6, class: 'tick', 'text-anchor': i === 0 ? 'start' : i === 5 ? 'end' : 'middle' },
      fmtClock(t)));
  }
  for (const se of series) {
    // NOTE: a gap of more than 5 s between samples (an idle worker writes none) breaks the line.
    // A lone sample (no neighbour within 5 s) gets a dot, since a one-point path draws nothing.
    const segments = [];
    let prev = null;
    for (const [t, v] of se.points) {
      if (t < t0 || v === null || v === undefined) continue;
      if (prev === null || t - prev > 5000) segments.push([]);
      segments[segments.length - 1].push([x(t).toFixed(1), y(v).toFixed(1)]);
      prev = t;
    }
    const cls = `${se.cls}${se.dashed ? ' dashed' : ''}`;
    const d = segments.map((seg) => seg.map(([px, py], i) => `${i ? 'L' : 'M'}${px},${py}`).join('')).join('');
    if (d) svg.append(s('path', { d, class: `line ${cls}` }, s('title', {}, se.label)));
    for (const seg of segments)
      if (seg.length === 1) svg.append(s('circle', { cx: seg[0][0], cy: seg[0][1], r: 2.5, class: `dot ${cls}` }, s('title', {}, se.label)));
  }
  if (!series.some((se) => se.points.length)) {
    svg.append(s('text', { x: W / 2, y: H / 2, class: 'empty', 'text-anchor': 'middle' }, 'no samples in this window'));
  }
  return h('figure', { class: 'chart-box' }, h('figcaption', {}, title), svg, legend(series));
}

export const SPAN_KINDS = ['queue_wait', 'prefill', 'decode', 'tool', 'client_wait', 'parked', 'webhook'];

function attrsText(attrs) {
  const show = (v) => (typeof v === 'object' ? JSON.stringify(v) : typeof v === 'number' && !Number.isInteger(v) ? v.toFixed(2) : v);
  return Object.entries(attrs || {}).map(([k, v]) => `${k}=${show(v)}`).join(', ');
}

// The timeline's entries as a table (in a <details>): what the chart's tooltips say, readable at once.
export function timelineTable(timeline) {
  const t0 = timeline.created_ms;
  const rows = (timeline.spans || []).map((sp) => ({ at: sp.start_ms, kind: sp.kind, turn: sp.turn, label: sp.label,
    dur: sp.end_ms === null || sp.end_ms === undefined ? 'open' : fmtMs(sp.end_ms - sp.start_ms), attrs: sp.attrs }))
    .concat((timeline.marks || []).map((m) => ({ at: m.at_ms, kind: `◆ ${m.kind}`, turn: null, label: m.label, dur: '', attrs: m.attrs })))
    .sort((a, b) => a.at - b.at);
  return h('details', { class: 'timeline-table' }, h('summary', {}, `Spans and marks (${rows.length})`),
    h('table', {}, h('thead', {}, h('tr', {}, ['at', 'kind', 'turn', 'label', 'duration', 'attrs'].map((x) => h('th', {}, x)))),
      h('tbody', {}, rows.map((r) => h('tr', {}, h('td', { class: 'num' }, `+${fmtMs(r.at - t0)}`), h('td', {}, r.kind),
        h('td', { class: 'num' }, r.turn ?? ''), h('td', {}, r.label || ''), h('td', { class: 'num' }, r.dur),
        h('td', { class: 'mono' }, attrsText(r.attrs)))))));
}

// timeline: the GET /v1/jobs/{id}/timeline object. nowMs closes open spans of a live job.
export function timelineChart(timeline, nowMs = Date.now()) {
  const spans = timeline.spans || [];
  const marks = timeline.marks || [];
  const t0 = timeline.created_ms;
  let t1 = timeline.finished_ms || 0;
  for (const sp of spans) t1 = Math.max(t1, sp.end_ms ?? (timeline.finished_ms || nowMs));
  for (const m of marks) t1 = Math.max(t1, m.at_ms);
  if (t1 <= t0) t1 = t0 + 1;

  const kinds = SPAN_KINDS.filter((k) => spans.some((sp) => sp.kind === k));
  for (const sp of spans) if (!kinds.includes(sp.kind)) kinds.push(sp.kind);
  const lanes = (marks.length ? ['marks'] : []).concat(kinds);
  const W = 900, L = 96, R = 14, T = 6, LANE = 24, B = 24;
  const H = T + lanes.length * LANE + B;
  const x = (t) => L + ((t - t0) / (t1 - t0)) * (W - L - R);
  const laneY = (k) => T + lanes.indexOf(k) * LANE;

  const svg = s('svg', { viewBox: `0 0 ${W} ${H}`, class: 'chart timeline', role: 'img', 'aria-label': 'job timeline' });
  for (const k of lanes) {
    svg.append(s('line', { x1: L, x2: W - R, y1: laneY(k) + LANE, y2: laneY(k) + LANE, class: 'grid' }),
      s('text', { x: L - 8, y: laneY(k) + LANE / 2 + 4, class: 'lane-label', 'text-anchor': 'end' }, k));
  }
  for (let i = 0; i <= 6; ++i) {
    const t = t0 + ((t1 - t0) * i) / 6;
    svg.append(s('line', { x1: x(t), x2: x(t), y1: T, y2: H - B, class: 'grid' }),
      s('text', { x: x(t), y: H - 6, class: 'tick', 'text-anchor': i === 0 ? 'start' : i === 6 ? 'end' : 'middle' },
        `+${fmtMs(t - t0)}`));
  }
  for (const sp of spans) {
    const open = sp.end_ms === null || sp.end_ms === undefined;
    const end = open ? (timeline.finished_ms || nowMs) : sp.end_ms;
    const tip = `${sp.kind}${sp.turn !== null && sp.turn !== undefined ? ` (turn ${sp.turn})` : ''}: ${sp.label || ''}\n` +
      `+${fmtMs(sp.start_ms - t0)} for ${fmtMs(end - sp.start_ms)}${open ? ' (open)' : ''}\n${attrsText(sp.attrs)}`;
    svg.append(s('rect', {
      x: x(sp.start_ms), y: laneY(sp.kind) + 4, width: Math.max(1.5, x(end) - x(sp.start_ms)), height: LANE - 8, rx: 2,
      class: `span k-${sp.kind}${open ? ' open' : ''}`, 'data-kind': sp.kind,
    }, s('title', {}, tip)));
  }
  for (const m of marks) {
    const mx = x(m.at_ms);
    svg.append(s('g', { class: 'mark', 'data-kind': m.kind },
      s('line', { x1: mx, x2: mx, y1: T + 2, y2: H - B, class: 'mark-line' }),
      s('path', { d: `M${mx},${laneY('marks') + 5}l5,7l-5,7l-5,-7z`, class: 'mark-dot' }),
      s('title', {}, `${m.kind}: ${m.label || ''}\n+${fmtMs(m.at_ms - t0)}\n${attrsText(m.attrs)}`)));
  }
  return h('figure', { class: 'chart-box' }, svg,
    legend(kinds.map((k) => ({ label: k, cls: `k-${k}` }))));
}

// Dashboard entry: key handling (form, sessionStorage) and the hash router
// (#/jobs, #/jobs/ID, #/engine, #/workers); each page mounts into <main> and returns its unmount.
import { getKey, setKey, forgetKey, onUnauthorized } from './api.js';
import { clear } from './dom.js';
import { mountJobs } from './jobs_page.js';
import { mountJob } from './job_page.js';
import { mountEngine } from './engine_page.js';
import { mountWorkers } from './workers_page.js';

const $ = (id) => document.getElementById(id);
const page = $('page');
let unmount = null;

function showKeyForm(message) {
  if (unmount) { unmount(); unmount = null; }
  clear(page);
  $('key-form-section').hidden = false;
  $('key-status').hidden = true;
  $('key-error').hidden = !message;
  $('key-error').textContent = message || '';
  $('key-input').focus();
}

function route() {
  if (unmount) { unmount(); unmount = null; }
  clear(page);
  if (!getKey()) return showKeyForm();
  $('key-form-section').hidden = true;
  $('key-status').hidden = false;
  $('key-label').textContent = `key ${getKey().slice(0, 8)}…`;
  const hash = location.hash.replace(/^#/, '') || '/jobs';
  const [path, query] = hash.split('?');
  const params = new URLSearchParams(query || '');
  const parts = path.split('/').filter(Boolean);
  for (const a of document.querySelectorAll('[data-nav]')) a.classList.toggle('active', a.dataset.nav === parts[0]);
  if (parts[0] === 'jobs' && parts[1]) unmount = mountJob(page, decodeURIComponent(parts[1]));
  else if (parts[0] === 'engine') unmount = mountEngine(page);
  else if (parts[0] === 'workers') unmount = mountWorkers(page);
  else unmount = mountJobs(page, params);
}

$('key-form').addEventListener('submit', (e) => {
  e.preventDefault();
  const key = $('key-input').value.trim();
  if (!key) return;
  setKey(key);
  $('key-input').value = '';
  route();
});
$('key-forget').addEventListener('click', () => { forgetKey(); showKeyForm(); });
onUnauthorized(() => { forgetKey(); showKeyForm('The server refused this key (401). Enter another.'); });
window.addEventListener('hashchange', route);
route();

// Gantry's portal: each page is a shell the server renders (who is signed
// in, the teams, the CSRF token); this script fills it from the REST API with
// the session cookie, as any client would. No inline script or style (the
// CSP forbids them), no innerHTML with data: text goes in as text.
'use strict';

const csrf = (document.querySelector('meta[name="csrf-token"]') || {}).content || '';
const statusLine = document.getElementById('status');

// api calls the REST API; a problem+json answer is thrown as an Error with
// the problem attached (err.problem: title, detail, errors[]).
async function api(method, path, body, headers) {
  const h = Object.assign({ Accept: 'application/json' }, headers || {});
  if (method !== 'GET') h['X-CSRF-Token'] = csrf;
  if (body !== undefined) h['Content-Type'] = 'application/json';
  const resp = await fetch(path, { method, headers: h, body: body === undefined ? undefined : JSON.stringify(body), credentials: 'same-origin' });
  if (resp.status === 204) return null;
  const text = await resp.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (e) { data = { title: text }; }
  if (!resp.ok) {
    if (resp.status === 403 && data && data.type === SECOND_FACTOR) askSecondFactor(method);
    const err = new Error(problemText(data, resp.status));
    err.problem = data || {};
    err.status = resp.status;
    throw err;
  }
  return data;
}

// SECOND_FACTOR is the problem type of a refusal that a sign-in with a
// second factor lifts (platform roles need one).
const SECOND_FACTOR = 'https://gantry.dev/problems/second-factor-required';

// askSecondFactor sends the person through a fresh sign-in that asks the
// provider for a second factor, back to this page — when the page itself
// was refused (a read), and at most once in five minutes, so that a provider
// that cannot give one does not send the browser round in circles. A refused
// change stays on the page with the server's message (unsaved work stays).
function askSecondFactor(method) {
  if (method !== 'GET') return;
  const key = 'gantry-second-factor-asked';
  const last = Number(sessionStorage.getItem(key) || 0);
  if (Date.now() - last < 5 * 60 * 1000) return;
  sessionStorage.setItem(key, String(Date.now()));
  location.assign('/auth/login?secondFactor=1&return=' + encodeURIComponent(location.pathname + location.search));
}

// problemText is a problem as a person reads it; a 403 says which
// permission is missing (the server's detail names it and who grants it).
function problemText(p, status) {
  if (!p) return 'HTTP ' + status;
  let s = p.title || ('HTTP ' + status);
  if (p.detail) s += ': ' + p.detail;
  return s;
}

// listAll follows a list's pages (up to 2,000 items).
async function listAll(path) {
  const sep = path.includes('?') ? '&' : '?';
  let items = [], cursor = '';
  do {
    const page = await api('GET', path + sep + 'limit=200' + (cursor ? '&cursor=' + encodeURIComponent(cursor) : ''));
    items = items.concat(page.items);
    cursor = page.nextCursor || '';
  } while (cursor && items.length < 2000);
  return items;
}

// problemLines are a problem's field errors as "file:line: field: detail"
// lines (a request's own message when it names no field).
function problemLines(err) {
  const list = (err.problem && err.problem.errors) || [];
  if (!list.length) return [err.message];
  return list.map((e) => (e.file ? e.file + (e.line ? ':' + e.line : '') + ': ' : '') + (e.field ? e.field + ': ' : '') + e.detail);
}

// showFieldErrors puts each of the server's field errors next to the input
// whose data-field it names (its span #err-<field>), the rest in #err-form,
// and moves the focus to the first field refused.
function showFieldErrors(form, err) {
  for (const e of form.querySelectorAll('.field-error')) e.textContent = '';
  for (const e of form.querySelectorAll('[aria-invalid]')) e.removeAttribute('aria-invalid');
  if (!err) return;
  const list = (err.problem && err.problem.errors) || [];
  const rest = [];
  for (const fe of list) {
    const input = form.querySelector('[data-field="' + CSS.escape(fe.field) + '"]');
    const span = document.getElementById('err-' + fe.field);
    if (input && span) {
      span.textContent = fe.detail;
      input.setAttribute('aria-invalid', 'true');
    } else rest.push((fe.field ? fe.field + ': ' : '') + fe.detail);
  }
  document.getElementById('err-form').textContent = rest.length ? rest.join('; ') : (list.length ? '' : err.message);
  const first = form.querySelector('[aria-invalid]');
  if (first) first.focus();
}

function say(text) { if (statusLine) statusLine.textContent = text; }

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'text') e.textContent = v; else e.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children) if (c !== null && c !== undefined) e.append(c);
  return e;
}

const money = (x) => '$' + (x || 0).toFixed(2);

function gpuText(g) {
  if (!g) return '';
  if (g.class === 'CPU') return 'CPU only';
  return g.count + ' × ' + g.class + (g.migProfile ? ' MIG ' + g.migProfile : '');
}

function age(iso) {
  const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (s < 60) return Math.round(s) + 's';
  if (s < 3600) return Math.round(s / 60) + 'm';
  if (s < 86400) return Math.round(s / 3600) + 'h';
  return Math.round(s / 86400) + 'd';
}

// ---------------------------------------------------------------- catalog

async function catalogPage() {
  const list = document.getElementById('templates');
  const [templates, classes] = await Promise.all([api('GET', '/api/v1/templates'), api('GET', '/api/v1/gpu-classes')]);
  const byName = Object.fromEntries(classes.items.map((c) => [c.name, c]));
  for (const v of templates.items) {
    const t = v.template, g = t.spec.gpu || { classes: [], count: {} };
    const prices = el('ul', { class: 'prices' });
    for (const c of g.classes) {
      const k = byName[c];
      prices.append(el('li', { text: c + (k ? ' — ' + money(k.price.onDemand) + '/h, ' + k.memoryGiB + ' GiB' : '') }));
    }
    if (t.spec.cpuOnly) prices.append(el('li', { text: 'CPU only — no GPU, priced per core-hour (up to ' + t.spec.cpuOnly.maxCPU + ' cores, ' + t.spec.cpuOnly.maxMemory + ')' }));
    const cpuDefault = t.spec.cpuOnly && (t.spec.cpuOnly.default || !g.classes.length);
    const card = el('li', { class: 'card', 'data-template': t.metadata.name },
      el('h2', { text: t.metadata.title || t.metadata.name }),
      el('p', { class: 'muted', text: t.metadata.name + ' · ' + t.spec.workload + ' · version ' + v.version }),
      t.metadata.description ? el('p', { text: t.metadata.description }) : null,
      el('p', { text: 'Default: ' + (cpuDefault ? 'CPU only' : g.count.default + ' × ' + g.defaultClass + (g.defaultMigProfile ? ', MIG ' + g.defaultMigProfile : '')) }),
      prices,
      el('a', { class: 'button', href: '/launch/' + encodeURIComponent(t.metadata.name), 'aria-label': 'Launch ' + (t.metadata.title || t.metadata.name), text: 'Launch' }),
      // Edit only for who may change templates (the server decides anyway).
      document.body.dataset.canEdit === 'true' ? ' ' : null,
      document.body.dataset.canEdit === 'true' ? el('a', { href: '/templates/' + encodeURIComponent(t.metadata.name) + '/edit', 'aria-label': 'Edit ' + (t.metadata.title || t.metadata.name), text: 'Edit' }) : null);
    list.append(card);
  }
  say(templates.items.length + ' templates');
}

// ----------------------------------------------------------------- launch

async function launchPage(name) {
  const form = document.getElementById('launch');
  const [tv, classes] = await Promise.all([api('GET', '/api/v1/templates/' + encodeURIComponent(name)), api('GET', '/api/v1/gpu-classes')]);
  const t = tv.template, g = t.spec.gpu || { classes: [], count: { min: 0, max: 0, default: 0 } };
  document.getElementById('template-title').textContent = t.metadata.title || t.metadata.name;
  document.getElementById('template-description').textContent = t.metadata.description || '';
  const byName = Object.fromEntries(classes.items.map((c) => [c.name, c]));
  const classSel = document.getElementById('f-class');
  // A template's CPU-only choice is one more option: no GPU, on the CPU nodes.
  const cpuOnly = '(cpu)';
  const cpuDefault = t.spec.cpuOnly && (t.spec.cpuOnly.default || !g.classes.length);
  for (const c of g.classes) {
    const k = byName[c];
    classSel.append(el('option', { value: c, selected: !cpuDefault && c === g.defaultClass, text: c + (k ? ' (' + k.memoryGiB + ' GiB, ' + money(k.price.onDemand) + '/h)' : '') }));
  }
  if (t.spec.cpuOnly) classSel.append(el('option', { value: cpuOnly, selected: cpuDefault, text: 'CPU only (no GPU, priced per core-hour)' }));
  const count = document.getElementById('f-count');
  count.min = g.count.min; count.max = g.count.max; count.value = g.count.default;
  const migSel = document.getElementById('f-mig');
  const fillMIG = () => {
    const k = byName[classSel.value];
    const keep = migSel.value;
    migSel.replaceChildren(el('option', { value: '', text: 'whole GPU' }));
    for (const p of (g.migProfiles || [])) {
      const prof = k && (k.migProfiles || []).find((m) => m.name === p);
      if (!prof) continue; // this class cannot be cut this way
      const price = k.price.onDemand * Math.max(prof.computeShare, prof.memoryShare);
      migSel.append(el('option', { value: p, text: p + ' (' + money(price) + '/h)' }));
    }
    const want = keep || (classSel.value === g.defaultClass ? g.defaultMigProfile : '');
    if ([...migSel.options].some((o) => o.value === want)) migSel.value = want || '';
  };
  // CPU only: no count, no MIG profile.
  const gpuFields = () => {
    const cpu = classSel.value === cpuOnly;
    count.closest('.field').hidden = cpu;
    migSel.closest('.field').hidden = cpu;
  };
  fillMIG();
  gpuFields();
  classSel.addEventListener('change', fillMIG);
  classSel.addEventListener('change', gpuFields);

  // One input per typed parameter, with the template's constraints as the
  // browser's hints; the server's check is the one that counts.
  const params = document.getElementById('parameters');
  const inputs = {};
  for (const p of (t.spec.parameters || [])) {
    const id = 'p-' + p.name, field = 'parameters.' + p.name, errId = 'err-' + field;
    let input;
    if (p.type === 'enum') {
      input = el('select', { id, name: p.name });
      for (const v of p.values || []) input.append(el('option', { value: v, text: v, selected: v === p.default }));
    } else if (p.type === 'bool') {
      input = el('input', { id, name: p.name, type: 'checkbox' });
      input.checked = p.default === true;
    } else {
      input = el('input', { id, name: p.name, type: p.type === 'int' ? 'number' : 'text',
        min: p.min, max: p.max, pattern: p.pattern, required: p.required === true });
      if (p.default !== undefined && p.default !== null) input.value = String(p.default);
    }
    input.setAttribute('data-field', field);
    input.setAttribute('aria-describedby', errId + (p.description ? ' h-' + p.name : ''));
    inputs[p.name] = { input, p };
    params.append(el('div', { class: 'field' },
      el('label', { for: id, text: p.name + (p.required ? ' (required)' : '') }), input,
      p.description ? el('small', { id: 'h-' + p.name, text: p.description }) : null,
      el('span', { class: 'field-error', id: errId })));
  }
  if (!(t.spec.parameters || []).length) params.hidden = true;

  const request = () => {
    const teamSel = document.getElementById('f-team');
    const other = document.getElementById('f-team-other');
    const body = { template: name, team: (other && other.value.trim()) || teamSel.value,
      gpu: { class: classSel.value, count: Number(count.value) }, parameters: {} };
    if (migSel.value) body.gpu.migProfile = migSel.value;
    if (classSel.value === cpuOnly) { delete body.gpu; body.cpuOnly = true; }
    for (const [n, { input, p }] of Object.entries(inputs)) {
      if (p.type === 'bool') body.parameters[n] = input.checked;
      else if (p.type === 'int') { if (input.value !== '') body.parameters[n] = Number(input.value); }
      else if (input.value !== '') body.parameters[n] = input.value;
    }
    return body;
  };

  // The estimate follows the choices (debounced).
  const est = document.getElementById('estimate');
  let timer = null, seq = 0;
  const estimate = () => {
    clearTimeout(timer);
    timer = setTimeout(async () => {
      const mine = ++seq;
      try {
        const e = await api('POST', '/api/v1/workloads/estimate', request());
        if (mine !== seq) return;
        const lines = [money(e.pricePerHour) + ' per hour' + (e.onDemandPerHour ? ' (spot; on demand ' + money(e.onDemandPerHour) + ')' : '')];
        if (e.costAtMaxRuntime !== undefined) lines.push('at most ' + money(e.costAtMaxRuntime) + ' if it runs its maximum runtime');
        if (e.gpu.class !== 'CPU') lines.push('quota: ' + e.quotaUsed + ' of ' + e.quota + ' GPUs of this class in use by the team');
        else if (e.quota > 0) lines.push('quota: ' + e.quotaUsed + ' of ' + e.quota + ' cores in use by the team\'s CPU-only launches');
        if (e.budget) lines.push('budget: ' + money(e.budget.spent) + ' of ' + money(e.budget.amount) + ' spent this period');
        if (e.needsApproval) lines.push('needs approval before it starts');
        if (e.held) lines.push('the team\'s queue is held by its budget');
        lines.push((e.startsNow ? 'starts now' : 'will queue') + (e.why ? ': ' + e.why : ''));
        est.replaceChildren(el('h2', { text: 'Estimate' }), el('ul', {}, ...lines.map((l) => el('li', { text: l }))));
      } catch (err) {
        if (mine === seq) est.replaceChildren(el('h2', { text: 'Estimate' }), el('p', { text: err.message }));
      }
    }, 300);
  };
  form.addEventListener('input', estimate);
  form.addEventListener('change', estimate);
  estimate();

  // One Idempotency-Key per form: a double click, or a retry after a lost
  // answer, launches once.
  let key = crypto.randomUUID();
  const submit = document.getElementById('submit');
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    if (submit.disabled) return;
    submit.disabled = true;
    say('Launching…');
    try {
      const w = await api('POST', '/api/v1/workloads', request(), { 'Idempotency-Key': key });
      key = crypto.randomUUID();
      // What the estimate said of it travels to its page, shown once there.
      if (w.warnings && w.warnings.length) sessionStorage.setItem('gantry-warnings-' + w.id, JSON.stringify(w.warnings));
      location.assign('/workloads/' + encodeURIComponent(w.id));
    } catch (err) {
      showFieldErrors(form, err);
      say('Not launched: ' + err.message);
      if (err.status && err.status < 500) key = crypto.randomUUID(); // refused: a corrected form is a new launch
    } finally {
      submit.disabled = false;
    }
  });
}

// -------------------------------------------------------------- workloads

// progressBar shows a training run's progress as its run reported it: a
// bar with its percent and ETA (and, in full, the step, pace, restarts and
// latest metrics); '-' when it reported nothing.
function progressBar(p, full) {
  if (!p || !p.reported) return full ? 'no progress reported' : '-';
  const parts = [];
  if (p.totalSteps) parts.push('step ' + p.step + ' of ' + p.totalSteps);
  else parts.push('step ' + p.step);
  if (full && p.stepsPerSecond) parts.push(p.stepsPerSecond.toPrecision(3) + ' steps/s');
  if (p.eta && p.fraction < 1) parts.push('ETA ' + new Date(p.eta).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' }));
  if (full && p.restarts) parts.push('restarted ' + p.restarts + (p.resumedFrom !== undefined ? ', resumed from step ' + p.resumedFrom : ''));
  if (full && p.metrics) {
    for (const [k, v] of Object.entries(p.metrics).sort()) parts.push(k + ' ' + Number(v.toPrecision(4)));
  }
  if (full && p.verdict) parts.push('early stopping (' + p.verdict.rule + (p.verdict.action === 'stop' ? ', stopped' : ', flagged') + '): ' + p.verdict.reason);
  if (full && p.keptBy) parts.push('kept going by ' + p.keptBy);
  const text = parts.join(' · ');
  if (p.fraction === undefined) return el('span', { class: 'progress', text });
  const pct = Math.round(p.fraction * 100);
  return el('span', { class: 'progress' },
    el('progress', { max: '100', value: String(pct), 'aria-label': 'Progress: ' + pct + ' percent' }),
    el('span', { text: ' ' + pct + '% · ' + text }));
}

async function workloadsPage() {
  const body = document.querySelector('#workloads tbody');
  const filter = document.getElementById('team-filter');
  const refresh = async () => {
    const q = filter.value ? '?team=' + encodeURIComponent(filter.value) : '';
    try {
      const list = { items: await listAll('/api/v1/workloads' + q) };
      body.replaceChildren(...list.items.map((w) => el('tr', { 'data-id': w.id },
        el('td', {}, el('a', { href: '/workloads/' + encodeURIComponent(w.id), text: w.name })),
        el('td', { text: w.team }),
        el('td', { class: 'st-' + w.status, text: w.status + (w.reason ? ': ' + w.reason : '') }),
        el('td', {}, progressBar(w.progress, false)),
        el('td', { text: gpuText(w.gpu) }),
        el('td', { text: age(w.createdAt) }),
        el('td', { text: money(w.costSoFar) }))));
      say(list.items.length + ' workloads');
    } catch (err) {
      say('Could not load workloads: ' + err.message);
    }
  };
  filter.addEventListener('change', refresh);
  await refresh();
  setInterval(refresh, 5000);
}

// when is a moment in the reader's time, '-' for none.
function when(iso) { return iso ? new Date(iso).toLocaleString() : '-'; }

// duration is a running time in seconds as 1 h 02 min, 5 min 03 s or 42 s.
function duration(sec) {
  sec = Math.round(sec || 0);
  const h = Math.floor(sec / 3600), m = Math.floor(sec % 3600 / 60), s = sec % 60;
  const two = (n) => String(n).padStart(2, '0');
  if (h) return h + ' h ' + two(m) + ' min';
  if (m) return m + ' min ' + two(s) + ' s';
  return s + ' s';
}

async function historyPage() {
  const body = document.querySelector('#history tbody');
  const teamSel = document.getElementById('history-team');
  const mine = document.getElementById('history-mine');
  const total = document.getElementById('history-total');
  const refresh = async () => {
    let q = '?ended=true';
    if (teamSel.value) q += '&team=' + encodeURIComponent(teamSel.value);
    if (mine.checked) q += '&owner=' + encodeURIComponent(document.body.dataset.me || '');
    try {
      const items = await listAll('/api/v1/workloads' + q);
      let cost = 0, ran = 0;
      body.replaceChildren(...items.map((w) => {
        cost += w.costSoFar;
        ran += w.ranSeconds;
        return el('tr', { 'data-id': w.id },
          el('td', {}, el('a', { href: '/workloads/' + encodeURIComponent(w.id), text: w.name })),
          el('td', { text: w.ownerName || w.owner }),
          el('td', { text: w.template + ' v' + w.templateVersion }),
          el('td', { text: gpuText(w.gpu) }),
          el('td', { text: when(w.startedAt) }),
          el('td', { text: when(w.endedAt) }),
          el('td', { text: w.attempts ? duration(w.ranSeconds) : '-' }),
          el('td', { text: String(w.attempts) }),
          el('td', { class: 'st-' + w.status, text: w.status + (w.reason ? ': ' + w.reason : '') }),
          el('td', { text: w.exitCode === undefined ? '-' : String(w.exitCode) }),
          el('td', { text: money(w.costSoFar) }));
      }));
      total.textContent = items.length + (items.length === 1 ? ' ended workload, ' : ' ended workloads, ') + duration(ran) + ' running, ' + money(cost) + ' in all';
    } catch (err) {
      say('Could not load the history: ' + err.message);
    }
  };
  teamSel.addEventListener('change', refresh);
  mine.addEventListener('change', refresh);
  await refresh();
}

// ----------------------------------------------------------------- trials

// trialChoice names a trial run's choice: 'H100-80GB × 2', 'H100-80GB 3g.40gb'.
function trialChoice(r) {
  return r.migProfile ? r.class + ' ' + r.migProfile : r.class + ' × ' + r.gpus;
}

async function trialsPage(id) {
  if (!id) {
    const body = document.querySelector('#trials tbody');
    const list = await api('GET', '/api/v1/trials');
    body.replaceChildren(...list.items.map((t) => el('tr', { 'data-id': t.id },
      el('td', {}, el('a', { href: '/trials/' + encodeURIComponent(t.id), text: t.id })),
      el('td', { text: t.team }),
      el('td', { text: t.template }),
      el('td', { text: t.runs.map(trialChoice).join(', ') }),
      el('td', { text: String(t.steps) }),
      el('td', { text: when(t.createdAt) }))));
    say(list.items.length + ' trials');
    return;
  }
  const body = document.querySelector('#trial-runs tbody');
  const num = (v, d) => (v === undefined ? '-' : String(Number(Number(v).toPrecision(d))));
  const refresh = async () => {
    const t = await api('GET', '/api/v1/trials/' + encodeURIComponent(id));
    document.getElementById('trial-head').textContent = t.template + ' in team ' + t.team + ': each run stopped at step ' + t.steps +
      ' or after ' + t.maxRuntime + (t.maxCost ? ' or $' + t.maxCost.toFixed(2) : '') + (t.deadline ? '; the full run within ' + t.deadline : '') +
      (t.done ? ' — done.' : ' — measuring…');
    body.replaceChildren(...t.runs.map((r, i) => el('tr', { class: t.best === i ? 'best' : '', 'data-choice': r.class + (r.migProfile ? ' ' + r.migProfile : '×' + r.gpus) },
      el('th', { scope: 'row' }, r.workload ? el('a', { href: '/workloads/' + encodeURIComponent(r.workload), text: trialChoice(r) }) : trialChoice(r),
        t.best === i ? el('strong', { text: ' (best)' }) : ''),
      el('td', { class: r.status ? 'st-' + r.status : '', text: r.status ? r.status : 'not launched: ' + (r.error || '') }),
      el('td', { text: r.lastStep === undefined ? '-' : String(r.lastStep) }),
      el('td', { text: r.stepSeconds === undefined ? '-' : num(r.stepSeconds, 3) + ' (' + num(r.stepSecondsP10, 3) + '–' + num(r.stepSecondsP90, 3) + ')' }),
      el('td', { text: r.throughput === undefined ? '-' : num(r.throughput, 4) + ' ' + r.throughputMetric.replace('_per_s', '/s') }),
      el('td', { text: r.scaling === undefined ? '-' : Math.round(r.scaling * 100) + '%' }),
      el('td', { text: r.fullSeconds === undefined ? '-' : duration(r.fullSeconds) + (r.meetsDeadline === false ? ' (late)' : '') }),
      el('td', { text: r.fullCost === undefined ? '-' : money(r.fullCost) }),
      el('td', { text: r.pricePerHour === undefined ? '-' : money(r.pricePerHour) }),
      el('td', { text: (r.reports || 0) + ' reports, ' + (r.intervals || 0) + ' intervals' + (r.fullSteps ? ', ' + r.fullSteps + ' full steps' : '') }))));
    document.getElementById('trial-why').textContent = t.why || '';
    return t.done;
  };
  if (!(await refresh())) {
    const timer = setInterval(async () => {
      try {
        if (await refresh()) clearInterval(timer);
      } catch (err) {
        say('Could not load the trial: ' + err.message);
      }
    }, 10000);
  }
}

// --------------------------------------------------------------- workload

// sh quotes a word for a POSIX shell: the launch's values are the
// launcher's, and the lines below are for someone else to paste.
function sh(v) {
  const s = String(v);
  return /^[A-Za-z0-9_.:\/=@%+-]+$/.test(s) ? s : "'" + s.replaceAll("'", "'\\''") + "'";
}

function reproduce(w) {
  const g = w.gpu;
  const sets = Object.entries(w.parameters || {}).map(([k, v]) => ' --set ' + sh(k + '=' + v)).join('');
  const cpu = g.class === 'CPU';
  const choice = cpu ? ' --cpu-only' : ' --gpu ' + sh(g.class + ':' + g.count) + (g.migProfile ? ' --mig ' + sh(g.migProfile) : '');
  const cli = 'gantry launch ' + sh(w.template) + ' --team ' + sh(w.team) + choice + sets + ' --wait';
  const body = { template: w.template, team: w.team, gpu: { class: g.class, count: g.count }, parameters: w.parameters || {} };
  if (g.migProfile) body.gpu.migProfile = g.migProfile;
  if (cpu) { delete body.gpu; body.cpuOnly = true; }
  const curl = 'curl -H "Authorization: Bearer $GANTRY_TOKEN" -H \'Content-Type: application/json\' -H "Idempotency-Key: $(uuidgen)" \\\n  -d ' + sh(JSON.stringify(body)) + ' ' + sh(location.origin + '/api/v1/workloads');
  const py = 'from gantry import Gantry\nw = Gantry().launch(' + JSON.stringify(w.template) + ', team=' + JSON.stringify(w.team) +
    (cpu ? ', cpu_only=True' : ', gpu=' + JSON.stringify(g.class) + ', count=' + g.count + (g.migProfile ? ', mig=' + JSON.stringify(g.migProfile) : '')) +
    ', parameters=' + JSON.stringify(w.parameters || {}) + ')\nw.wait()';
  document.getElementById('repro-cli').textContent = cli;
  document.getElementById('repro-curl').textContent = curl;
  document.getElementById('repro-python').textContent = py;
}

// ------------------------------------------------------------ GPU charts

const SVG = 'http://www.w3.org/2000/svg';
function svg(tag, attrs) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  return e;
}

// What the charts draw: one chart per metric, a line per GPU or MIG
// instance (the mean of each step), with the unit's own scale.
const CHARTS = [
  ['gpu_util', 'GPU utilization', '%', 100],
  ['sm_active', 'SM activity', 'ratio', 1],
  ['fb_used', 'Memory used', 'MiB', 0],
  ['dram_active', 'DRAM activity', 'ratio', 1],
  ['pcie_tx', 'PCIe sent', 'B/s', 0],
  ['nvlink_tx', 'NVLink sent', 'B/s', 0],
];
const COLOURS = ['#0a58ca', '#b35900', '#116329', '#8250df', '#b00020', '#1b1f24'];

// chartFrame is an empty chart W×H with its axes (L to the left of the
// plot, B under it) and a function that writes a label on it.
function chartFrame(W, H, L, B, ariaLabel) {
  const chart = svg('svg', { viewBox: '0 0 ' + W + ' ' + H, role: 'img', 'aria-label': ariaLabel });
  chart.append(svg('line', { x1: L, y1: H - B, x2: W, y2: H - B, stroke: '#57606a' }));
  chart.append(svg('line', { x1: L, y1: 4, x2: L, y2: H - B, stroke: '#57606a' }));
  const label = (text, lx, ly, anchor) => { const t = svg('text', { x: lx, y: ly, 'font-size': 11, fill: '#1b1f24', 'text-anchor': anchor }); t.textContent = text; chart.append(t); };
  return [chart, label];
}

// drawCharts draws the series of a window, drawn here as SVG (no library,
// no CDN); highlight ({from, to}) shades an advice finding's evidence.
function drawCharts(box, data, highlight) {
  box.replaceChildren();
  const from = Date.parse(data.from), to = Date.parse(data.to);
  const W = 560, H = 140, L = 72, B = 18; // L: room for the widest value label
  let drawn = 0;
  for (const [metric, title, unit, fixedMax] of CHARTS) {
    const series = data.series.filter((s) => s.metric === metric && s.points.length);
    if (!series.length) continue;
    drawn++;
    let max = fixedMax;
    if (!max) for (const s of series) for (const p of s.points) max = Math.max(max, p.max);
    max = max || 1;
    const x = (t) => L + (W - L) * (t - from) / Math.max(1, to - from);
    const y = (v) => (H - B) - (H - B - 4) * Math.min(v, max) / max;
    const last = series.map((s) => s.points[s.points.length - 1].avg);
    const fig = el('figure', { class: 'chart', 'data-metric': metric });
    const [chart, label] = chartFrame(W, H, L, B, title + ': latest ' + last.map((v) => v.toFixed(2)).join(', ') + ' ' + unit);
    label(fmt(max, unit), L - 4, 12, 'end');
    label(fmt(max / 2, unit), L - 4, y(max / 2) + 4, 'end');
    label(fmt(0, unit), L - 4, H - B, 'end');
    const when = (t) => new Date(t).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });
    label(when(from), L, H - 4, 'start');
    label(when((from + to) / 2), x((from + to) / 2), H - 4, 'middle');
    label(when(to), W, H - 4, 'end');
    if (highlight) {
      const a = x(Math.max(from, highlight.from)), b = x(Math.min(to, highlight.to));
      if (b > a) chart.append(svg('rect', { class: 'evidence', x: a, y: 4, width: b - a, height: H - B - 4, fill: '#fff8c5', stroke: '#9a6700' }));
    }
    series.forEach((s, i) => {
      const pts = s.points.map((p) => x(Date.parse(p.t)).toFixed(1) + ',' + y(p.avg).toFixed(1)).join(' ');
      chart.append(svg('polyline', { points: pts, fill: 'none', stroke: COLOURS[i % COLOURS.length], 'stroke-width': 1.5 }));
    });
    const legend = el('figcaption', { text: title + ' (' + shownUnit(unit) + ') — ' + series.map((s, i) => device(s.device) + ': ' + fmt(last[i], unit)).join('; ') });
    fig.append(chart, legend);
    box.append(fig);
  }
  if (!drawn) box.append(el('p', { class: 'muted', text: 'No GPU readings in this window yet.' }));
  // The window's energy per device, as the series API gives it (its whole
  // minutes rolled up: not the last one or two); the node named when the
  // workload ran on several.
  const energy = data.energy || [];
  if (energy.length) {
    const how = { 'whole-gpu': 'whole GPU', 'mig-instance': 'its share of the GPU', 'time-sliced': 'its share of a shared GPU', 'time-sliced-even': 'an even share of a shared GPU' };
    const several = new Set(energy.map((e) => e.node)).size > 1;
    const kwh = energy.reduce((sum, e) => sum + e.kWh, 0);
    box.append(el('p', { class: 'energy', 'data-kwh': kwh.toFixed(6),
      text: 'GPU energy in this window\'s minutes rolled up: ' + kwh.toFixed(3) + ' kWh — ' +
        energy.map((e) => (several ? e.node + ' ' : '') + device(e.device) + ' ' + e.kWh.toFixed(3) + ' kWh (' + (how[e.how] || e.how) + ', ' +
          e.minutes + ' min measured' + (e.unmeasuredMinutes ? ', ' + e.unmeasuredMinutes + ' not' : '') + ')').join('; ') }));
  }
}

// drawRunCharts draws what a Job's run reported of itself (GET
// …/progress's series): a chart a metric, its value by step, at most eight.
function drawRunCharts(box, p) {
  box.replaceChildren();
  const reports = (p && p.series) || [];
  const names = [...new Set(reports.flatMap((r) => Object.keys(r.metrics || {})))].sort().slice(0, 8);
  if (!names.length) {
    box.append(el('p', { class: 'muted', text: p && p.reported ? 'Its reports carry no metrics.' : 'No progress reported yet.' }));
    return;
  }
  const W = 560, H = 140, L = 72, B = 18;
  names.forEach((name, n) => {
    const pts = reports.filter((r) => r.metrics && r.metrics[name] !== undefined).map((r) => [r.step, r.metrics[name]]);
    let lo = Math.min(...pts.map((q) => q[1])), hi = Math.max(...pts.map((q) => q[1]));
    if (hi === lo) { hi += Math.abs(hi) * 0.05 || 1; lo -= Math.abs(lo) * 0.05 || 1; }
    // A restart goes back over steps: the axis spans them all.
    const s0 = Math.min(...pts.map((q) => q[0])), s1 = Math.max(...pts.map((q) => q[0]), s0 + 1);
    const x = (st) => L + (W - L) * (st - s0) / (s1 - s0);
    const y = (v) => (H - B) - (H - B - 4) * (v - lo) / (hi - lo);
    const num = (v) => String(Number(v.toPrecision(4)));
    const [lastStep, last] = pts[pts.length - 1];
    const fig = el('figure', { class: 'chart', 'data-metric': name });
    const [chart, label] = chartFrame(W, H, L, B, 'Run metric ' + name + ': latest ' + num(last) + ' at step ' + lastStep);
    label(num(hi), L - 4, 12, 'end');
    label(num(lo), L - 4, H - B, 'end');
    label('step ' + s0, L, H - 4, 'start');
    label('step ' + s1, W, H - 4, 'end');
    chart.append(svg('polyline', { points: pts.map((q) => x(q[0]).toFixed(1) + ',' + y(q[1]).toFixed(1)).join(' '), fill: 'none', stroke: COLOURS[n % COLOURS.length], 'stroke-width': 1.5 }));
    fig.append(chart, el('figcaption', { text: name + ' — latest ' + num(last) + ' at step ' + lastStep + '; from ' + num(lo) + ' to ' + num(hi) + ' over ' + pts.length + ' reports' }));
    box.append(fig);
  });
}

// trackerCell is where a Job's tracker run is (its template's
// spec.tracking): the run id is the workload's own, the same across its
// restarts and requeues.
function trackerCell(t, id) {
  if (!t) return '-';
  const run = 'gantry-' + id;
  if (t.wandb) {
    const w = t.wandb;
    const text = 'Weights & Biases run ' + run + ' in ' + (w.entity ? w.entity + '/' : '') + w.project;
    // W&B's cloud: its run page. A server of one's own (baseURL) serves
    // its API there and its pages elsewhere: no link is guessed.
    if (!w.entity || w.baseURL) return text;
    return el('a', { id: 'tracker-link', href: 'https://wandb.ai/' + encodeURIComponent(w.entity) + '/' + encodeURIComponent(w.project) + '/runs/' + run,
      target: '_blank', rel: 'noopener', text });
  }
  if (t.mlflow) {
    const where = ' experiment ' + (t.mlflow.experiment || '(the template\'s name)') + ', the run tagged gantry.run_id = ' + run;
    // Only http(s) becomes a link (the server checks too).
    if (!/^https?:\/\//i.test(t.mlflow.uri)) return 'MLflow' + where;
    return el('span', {}, el('a', { id: 'tracker-link', href: t.mlflow.uri, target: '_blank', rel: 'noopener', text: 'MLflow' }), where);
  }
  return '-';
}

function device(d) { return 'GPU ' + d.index + (d.mig ? ' MIG ' + d.mig.profile : ''); }
// shownUnit is the unit fmt writes values of unit in: one unit a chart.
function shownUnit(unit) {
  return { ratio: '%', '%': '%', MiB: 'GiB', 'B/s': 'bytes per second' }[unit] || unit;
}

function fmt(v, unit) {
  if (unit === 'ratio') return (v * 100).toFixed(0) + '%';
  if (unit === '%') return v.toFixed(0) + '%';
  if (unit === 'MiB') return (v / 1024).toFixed(1) + ' GiB';
  if (unit === 'B/s') return v >= 1e9 ? (v / 1e9).toFixed(1) + ' GB/s' : (v / 1e6).toFixed(1) + ' MB/s';
  return v.toFixed(2);
}

async function workloadPage(id) {
  const path = '/api/v1/workloads/' + encodeURIComponent(id);
  const warned = sessionStorage.getItem('gantry-warnings-' + id);
  if (warned) {
    sessionStorage.removeItem('gantry-warnings-' + id);
    document.getElementById('w-warnings').replaceChildren(...JSON.parse(warned).map((m) => el('p', { class: 'warning', text: 'Launched, but ' + m })));
  }
  const stream = document.getElementById('stream-state');
  let current = null, shownAt = 0, shownStatus = '';
  let drawRuns = () => {}; // the run's metric charts, once set up below
  let trackerShown = false;
  // A run an early-stopping rule stopped or flagged can be kept going (one
  // call, recorded): offered to whoever may manage it.
  const showProgress = (p) => {
    const cell = document.getElementById('w-progress');
    cell.replaceChildren(progressBar(p, true));
    const can = current && ((current.actions || []).includes('stop') || (current.actions || []).includes('start'));
    if (p && p.verdict && !p.keptBy && can) {
      const keep = el('button', { type: 'button', id: 'keep-run', text: 'Keep it going' });
      keep.addEventListener('click', async () => {
        keep.disabled = true;
        try {
          showProgress(await api('POST', path + '/progress/keep'));
          say('Kept going: its early-stopping rules judge it no more.');
        } catch (err) {
          keep.disabled = false;
          say('Not kept: ' + err.message);
        }
      });
      cell.append(' ', keep);
    }
  };
  const render = (w) => {
    current = w;
    shownAt = Date.now();
    document.getElementById('w-name').textContent = w.name;
    document.getElementById('w-status').textContent = w.status;
    document.getElementById('w-status').className = 'st-' + w.status;
    if (w.kind === 'job') showProgress(w.progress); else document.getElementById('w-progress').replaceChildren('-');
    document.getElementById('run-metrics').hidden = w.kind !== 'job';
    if (w.kind === 'job') drawRuns();
    if (w.kind === 'job' && !trackerShown) {
      trackerShown = true;
      api('GET', '/api/v1/templates/' + encodeURIComponent(w.template) + '?version=' + w.templateVersion)
        .then((v) => document.getElementById('w-tracker').replaceChildren(trackerCell(v.template.spec.tracking, w.id)))
        .catch(() => { /* not shown: the template is not the reader's to read */ });
    }
    document.getElementById('w-reason').textContent = w.reason || '';
    // Moved off a node quarantined for a failed GPU (docs/faults.md): the
    // stream's updates do not carry the moves; a read does, as the page
    // opens and each time the status changes.
    if (w.status !== shownStatus) {
      shownStatus = w.status;
      api('GET', path).then((one) => document.getElementById('w-moves').replaceChildren(...(one.moves || []).map((m) =>
        el('p', { class: 'warning move', text: m.notice.charAt(0).toUpperCase() + m.notice.slice(1) + '.' })))).catch(() => { /* shown on the next change */ });
    }
    const tplCell = document.getElementById('w-template');
    tplCell.textContent = w.template + ' (version ' + w.templateVersion + ')';
    if (w.trial) tplCell.append(' — a run of ', el('a', { href: '/trials/' + encodeURIComponent(w.trial), text: 'trial ' + w.trial }));
    document.getElementById('w-team').textContent = w.team;
    document.getElementById('w-gpu').textContent = gpuText(w.gpu);
    document.getElementById('w-price').textContent = money(w.pricePerHour) + ' per hour';
    document.getElementById('w-cost').textContent = money(w.costSoFar);
    document.getElementById('w-started').textContent = when(w.startedAt);
    document.getElementById('w-ended').textContent = when(w.endedAt);
    document.getElementById('w-ran').textContent = w.attempts ? duration(w.ranSeconds) + ' over ' + w.attempts + (w.attempts === 1 ? ' attempt' : ' attempts') : '-';
    document.getElementById('w-exit').textContent = w.exitCode === undefined ? '-' : String(w.exitCode);
    // A notebook opens here, through Gantry (its in-cluster endpoint is for
    // other pods only): a link while it runs, why not otherwise.
    const open = document.getElementById('w-open');
    open.replaceChildren(!w.url ? '-' : w.status === 'Running'
      ? el('a', { id: 'open', class: 'button', href: w.url, target: '_blank', rel: 'noopener', text: 'Open' })
      : 'opens once it is Running');
    document.getElementById('w-endpoint').textContent = w.endpoint ? w.endpoint + ' (reachable from inside the cluster)' : '-';
    const a = w.approval;
    document.getElementById('w-approval').textContent = !a ? '-' :
      (a.decision ? a.decision + ' by ' + a.decidedBy + (a.note ? ': ' + a.note : '') :
        (a.restart ? 'starting it again waits: ' : 'waiting: ') + a.why + ' — any of ' + a.approvers.join(', ') + ' may approve until ' + new Date(a.expiresAt).toLocaleString());
    // What the lifecycle lets happen now, as the server says (not a copy
    // of its table here).
    const can = (act) => (w.actions || []).includes(act);
    document.getElementById('stop').disabled = !can('stop');
    document.getElementById('start').disabled = !can('start');
    document.getElementById('delete').disabled = !can('delete');
    reproduce(w);
    if (w.status === 'Running' && !following) follow();
  };
  // A Job's progress changes without its record changing (no event): read
  // it every 10 seconds while the Job is live.
  setInterval(async () => {
    if (!current || current.kind !== 'job' || (current.actions || []).indexOf('stop') < 0) return;
    try {
      showProgress(await api('GET', path + '/progress?limit=0'));
    } catch (err) {
      // the last reading stays
    }
  }, 10000);
  // The cost grows between events: count it here from the price.
  setInterval(() => {
    if (current && current.status === 'Running') {
      const c = current.costSoFar + current.pricePerHour * (Date.now() - shownAt) / 3600000;
      document.getElementById('w-cost').textContent = money(c);
    }
  }, 1000);

  // Live status: server-sent events; EventSource reconnects by itself after
  // a lost connection, and the server sends the workload again at once.
  const es = new EventSource(path + '/watch');
  es.addEventListener('open', () => { stream.textContent = 'Live.'; });
  es.addEventListener('workload', (ev) => render(JSON.parse(ev.data)));
  es.addEventListener('gone', (ev) => { stream.textContent = 'No longer available: ' + JSON.parse(ev.data); es.close(); });
  es.addEventListener('error', () => {
    stream.textContent = es.readyState === EventSource.CLOSED ? 'Disconnected; reload the page.' : 'Connection lost; reconnecting…';
  });

  // Logs stream into the page as the server sends them.
  const logs = document.getElementById('logs');
  const logState = document.getElementById('log-state');
  let following = false;
  async function follow() {
    if (following) return;
    following = true;
    logState.textContent = 'following…';
    try {
      const resp = await fetch(path + '/logs?follow=true&tailLines=500', { credentials: 'same-origin' });
      if (!resp.ok) {
        const p = await resp.json().catch(() => null);
        logState.textContent = problemText(p, resp.status);
        return;
      }
      logs.textContent = '';
      const reader = resp.body.getReader();
      const dec = new TextDecoder();
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        logs.append(dec.decode(value, { stream: true }));
        if (logs.textContent.length > 200000) logs.textContent = logs.textContent.slice(-150000); // the newest lines only
        logs.scrollTop = logs.scrollHeight;
      }
      logState.textContent = 'the log ended';
    } catch (err) {
      logState.textContent = 'log stream lost: ' + err.message;
    } finally {
      following = false;
    }
  }
  document.getElementById('follow').addEventListener('click', follow);

  // The cluster's events about it (scheduling, pulls, evictions), newest
  // first, every 10 s.
  const eventsNow = async () => {
    try {
      const ev = await api('GET', path + '/events');
      document.querySelector('#events tbody').replaceChildren(...ev.items.slice().reverse().slice(0, 50).map((e) =>
        el('tr', {}, el('td', { text: new Date(e.time).toLocaleTimeString() }), el('td', { text: e.type }), el('td', { text: e.object }),
          el('td', { text: e.reason + (e.count > 1 ? ' ×' + e.count : '') }), el('td', { text: e.message }))));
    } catch (err) { /* no cluster yet: the status says why */ }
  };
  eventsNow();
  setInterval(eventsNow, 10000);

  // GPU charts over the chosen window, redrawn every 30 s; an advice
  // card's "show evidence" shades its window on them.
  const charts = document.getElementById('charts');
  const windowSel = document.getElementById('window');
  let highlight = null;
  // By default the window is the workload's life (at most a day, at least
  // five minutes), so that a new workload fills the chart, not a sliver.
  const chartsNow = async () => {
    const to = new Date();
    let minutes = Number(windowSel.value);
    if (windowSel.value === 'life') {
      const born = current && current.createdAt ? Date.parse(current.createdAt) : to - 3600000;
      minutes = Math.min(1440, Math.max(5, Math.ceil((to - born) / 60000)));
    }
    const from = new Date(to - minutes * 60000);
    try {
      const data = await api('GET', path + '/metrics?from=' + from.toISOString() + '&to=' + to.toISOString() +
        '&series=' + CHARTS.map((c) => c[0]).join(','));
      drawCharts(charts, data, highlight);
    } catch (err) {
      charts.replaceChildren(el('p', { class: 'muted', text: 'No charts: ' + err.message }));
    }
  };
  windowSel.addEventListener('change', chartsNow);
  chartsNow();
  setInterval(chartsNow, 30000);
  // A Job's run metrics, as its run reported them, redrawn every 30 s
  // while it is live (once otherwise).
  const runCharts = document.getElementById('run-charts');
  let runChartsAt = 0;
  drawRuns = async (again) => {
    const live = current && (current.actions || []).indexOf('stop') >= 0;
    if (!current || current.kind !== 'job' || (runChartsAt && !(again && live))) return;
    runChartsAt = Date.now();
    try {
      drawRunCharts(runCharts, await api('GET', path + '/progress?limit=500'));
    } catch (err) {
      runCharts.replaceChildren(el('p', { class: 'muted', text: 'No run metrics: ' + err.message }));
    }
  };
  if (current) drawRuns();
  setInterval(() => drawRuns(true), 30000);

  // Advice: each finding's reason, evidence and dollars; right-sizing
  // findings apply in one click (a relaunch with the recommended choice).
  const adviceBox = document.getElementById('advice');
  const adviceNow = async () => {
    try {
      const r = await api('GET', path + '/advice');
      if (!r.findings.length) { adviceBox.replaceChildren(el('p', { class: 'muted', text: 'No findings.' })); return; }
      adviceBox.replaceChildren(...r.findings.map((f) => {
        const card = el('article', { class: 'advice sev-' + f.severity, 'data-kind': f.kind },
          el('h3', { text: f.kind.replaceAll('-', ' ') + (f.monthlyUSD ? ' — ' + money(f.monthlyUSD) + ' a month' : '') }),
          el('p', { text: f.reason }),
          el('p', { class: 'muted', text: f.evidence.map((e) => e.metric + ' ' + e.stat + ' ' + e.value.toFixed(2)).join('; ') + ' · confidence ' + Math.round(f.confidence * 100) + '%' }),
          el('p', { text: f.action }));
        const u = new URL(f.seriesURL, location.origin);
        if (u.searchParams.get('from') && u.searchParams.get('to')) {
          const show = el('button', { type: 'button', text: 'Show the evidence' });
          show.addEventListener('click', () => {
            highlight = { from: Date.parse(u.searchParams.get('from')), to: Date.parse(u.searchParams.get('to')) };
            const span = (highlight.to - highlight.from) / 60000;
            windowSel.value = [...windowSel.options].map((o) => o.value).find((v) => Number(v) >= span) || '1440';
            chartsNow();
          });
          card.append(show);
        }
        if (f.recommend) {
          const apply = el('button', { type: 'button', text: 'Apply: relaunch on ' + (f.recommend.count || current.gpu.count) + ' × ' + current.gpu.class + (f.recommend.profile ? ' MIG ' + f.recommend.profile : ' (whole GPUs)') });
          apply.addEventListener('click', async () => {
            if (!confirm('Relaunch this workload with the recommended GPUs and stop this one?')) return;
            try {
              const a = await api('POST', path + '/advice/apply', { kind: f.kind });
              location.assign('/workloads/' + encodeURIComponent(a.workload.id));
            } catch (err) { say('Not applied: ' + err.message); }
          });
          card.append(apply);
        }
        return card;
      }));
    } catch (err) {
      adviceBox.replaceChildren(el('p', { class: 'muted', text: 'No advice: ' + err.message }));
    }
  };
  adviceNow();
  setInterval(adviceNow, 60000);

  const act = (button, verb, method, url, question) => {
    document.getElementById(button).addEventListener('click', async () => {
      if (!confirm(question)) return;
      try {
        const w = await api(method, url);
        if (w) render(w);
        say((current ? current.name : id) + ': ' + verb);
      } catch (err) {
        say(verb + ' refused: ' + err.message);
      }
    });
  };
  act('stop', 'stopped', 'POST', path + '/stop', 'Stop this workload? Its GPUs are given back; its volumes stay.');
  act('start', 'started', 'POST', path + '/start', 'Start this workload again?');
  act('delete', 'deleted', 'DELETE', path, 'Delete this workload? It stops for good; its record stays for accounting.');
}

// ----------------------------------------------------------------- tokens

async function tokensPage() {
  const body = document.querySelector('#tokens tbody');
  const form = document.getElementById('new-token');
  const refresh = async () => {
    const list = await api('GET', '/api/v1/tokens');
    body.replaceChildren(...list.items.map((k) => {
      const revoke = el('button', { type: 'button', 'aria-label': 'Revoke ' + k.name, text: 'Revoke', disabled: k.revoked });
      revoke.addEventListener('click', async () => {
        if (!confirm('Revoke the token ' + k.name + '? Whatever uses it stops working at once.')) return;
        try { await api('DELETE', '/api/v1/tokens/' + encodeURIComponent(k.id)); say(k.name + ' revoked'); await refresh(); } catch (err) { say(err.message); }
      });
      return el('tr', { 'data-id': k.id }, el('td', { text: k.name }), el('td', { text: k.team || 'all' }),
        el('td', { text: k.readOnly ? 'read-only' : 'read and write' }), el('td', { text: new Date(k.expiresAt).toLocaleDateString() }),
        el('td', { text: k.revoked ? 'revoked' : 'active' }), el('td', {}, revoke));
    }));
  };
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    showFieldErrors(form, null);
    const body = { name: document.getElementById('t-name').value.trim(), expiresInDays: Number(document.getElementById('t-days').value),
      readOnly: document.getElementById('t-readonly').checked };
    const team = document.getElementById('t-team').value;
    if (team) body.team = team;
    try {
      const k = await api('POST', '/api/v1/tokens', body);
      document.getElementById('token-value').textContent = k.token;
      document.getElementById('created').hidden = false;
      form.reset();
      await refresh();
    } catch (err) {
      showFieldErrors(form, err);
    }
  });
  await refresh();
}

// ------------------------------------------------------------------- team

// budgetBar draws spent against the budget with marks at its thresholds
// (80 % and 100 % unless the policy says otherwise), as SVG.
function budgetBar(b) {
  const W = 600, H = 34, full = Math.max(b.amount, b.spent, 1e-9) * 1.1;
  const x = (v) => W * v / full;
  const bar = svg('svg', { viewBox: '0 0 ' + W + ' ' + H, role: 'img', class: 'budget-bar',
    'aria-label': money(b.spent) + ' of ' + money(b.amount) + ' spent (' + Math.round(100 * b.spent / b.amount) + '%)' });
  bar.append(svg('rect', { x: 0, y: 6, width: x(b.amount), height: 16, fill: '#eaeef2', stroke: '#57606a' }));
  bar.append(svg('rect', { x: 0, y: 6, width: x(Math.min(b.spent, full)), height: 16, fill: b.spent >= b.amount ? '#b00020' : b.spent >= 0.8 * b.amount ? '#9a6700' : '#116329' }));
  for (const th of [0.8, 1]) { // the alert thresholds the policy uses unless it sets its own
    bar.append(svg('line', { x1: x(th * b.amount), y1: 2, x2: x(th * b.amount), y2: 26, stroke: '#1b1f24', 'stroke-width': 2, class: 'mark' }));
    const t = svg('text', { x: x(th * b.amount), y: 33, 'font-size': 9, 'text-anchor': 'middle', fill: '#1b1f24' });
    t.textContent = Math.round(th * 100) + '%';
    bar.append(t);
  }
  return bar;
}

async function teamPage(team) {
  const q = encodeURIComponent(team);
  const budgetBox = document.getElementById('budget');
  const refresh = async () => {
    try {
      const budgets = await api('GET', '/api/v1/budgets');
      const b = budgets.items.find((x) => x.team === team);
      budgetBox.replaceChildren(...(b ? [budgetBar(b),
        el('p', { id: 'budget-text', text: money(b.spent) + ' of ' + money(b.amount) + ' spent, ' + new Date(b.from).toLocaleDateString() + ' to ' + new Date(b.to).toLocaleDateString() + '; at the limit: ' + b.atLimit + (b.banner ? '. ' + b.banner : '') })]
        : [el('p', { id: 'budget-text', text: 'No budget is set for this team (policy/bindings.yaml, teams.' + team + '.budget).' })]));
    } catch (err) { budgetBox.replaceChildren(el('p', { text: err.message })); }
    // The month's cost and energy (docs/energy.md).
    try {
      const r = await api('GET', '/api/v1/teams/' + q + '/report');
      document.getElementById('month-text').textContent = money(r.total) + ' in ' + r.month + ', of which ' + money(r.idle) + ' while the GPUs idled; ' +
        r.kWh.toFixed(1) + ' kWh on the GPUs (' + r.facilityKWh.toFixed(1) + ' kWh at the facility, with its PUE)' +
        (r.carbonSource ? ', ' + r.kgCO2e.toFixed(1) + ' kg CO2e by ' + r.carbonSource + '.' : '.') +
        (r.deferred ? ' Waiting for cleaner power saved ' + r.deferred.savedKg.toFixed(1) + ' kg CO2e (' + r.deferred.savedPercent.toFixed(1) +
          ' %) over ' + r.deferred.workloads + ' flexible job' + (r.deferred.workloads === 1 ? '' : 's') + '.' : '');
    } catch (err) { document.getElementById('month-text').textContent = err.message; }

    // Not while a reason is being typed: the rows would be rebuilt under it.
    const typing = [...document.querySelectorAll('#approvals input')].some((i) => i.value || i === document.activeElement);
    if (!typing) try {
      const pending = { items: await listAll('/api/v1/workloads?team=' + q + '&status=PendingApproval') };
      document.querySelector('#approvals tbody').replaceChildren(...pending.items.map((w) => {
        const reason = el('input', { id: 'reason-' + w.id, 'aria-label': 'Reason for ' + w.name, placeholder: 'reason (recorded)' });
        const decide = (verb) => {
          const b = el('button', { type: 'button', text: verb === 'approve' ? 'Approve' : 'Deny', 'data-verb': verb, 'aria-label': (verb === 'approve' ? 'Approve ' : 'Deny ') + w.name });
          b.addEventListener('click', async () => {
            if (!reason.value.trim()) { reason.setAttribute('aria-invalid', 'true'); reason.focus(); say('Give a reason: it is recorded with the decision.'); return; }
            try {
              await api('POST', '/api/v1/workloads/' + encodeURIComponent(w.id) + '/' + verb, { reason: reason.value.trim() });
              b.closest('tr').remove(); // decided: its reason is no longer being typed
              say(w.name + ': ' + verb + (verb === 'deny' ? 'ed' : 'd'));
              await refresh();
            } catch (err) { say(err.message); }
          });
          return b;
        };
        return el('tr', { 'data-id': w.id }, el('td', {}, el('a', { href: '/workloads/' + encodeURIComponent(w.id), text: w.name })),
          el('td', { text: w.owner }), el('td', { text: gpuText(w.gpu) }), el('td', { text: w.approval ? w.approval.why : '' }),
          el('td', {}, reason, decide('approve'), decide('deny')));
      }));
    } catch (err) { say(err.message); }

    try {
      const running = { items: await listAll('/api/v1/workloads?team=' + q + '&status=Running') };
      let perHour = 0;
      document.querySelector('#running tbody').replaceChildren(...running.items.map((w) => {
        perHour += w.pricePerHour;
        return el('tr', { 'data-id': w.id }, el('td', {}, el('a', { href: '/workloads/' + encodeURIComponent(w.id), text: w.name })),
          el('td', { text: w.owner }), el('td', { text: gpuText(w.gpu) }), el('td', { text: money(w.pricePerHour) }), el('td', { text: money(w.costSoFar) }));
      }));
      document.getElementById('running-total').textContent = running.items.length + ' running, ' + money(perHour) + ' per hour';
    } catch (err) { say(err.message); }

    try {
      const advice = await api('GET', '/api/v1/advice?team=' + q);
      document.querySelector('#team-advice tbody').replaceChildren(...advice.items.map((a) =>
        el('tr', {}, el('td', {}, el('a', { href: '/workloads/' + encodeURIComponent(a.workload), text: a.name })),
          el('td', { text: a.finding.kind + ': ' + a.finding.reason }), el('td', { text: money(a.finding.monthlyUSD) }))));
    } catch (err) { say(err.message); }
  };
  await refresh();
  setInterval(refresh, 10000);
}

// --------------------------------------------------------------- platform

// section fills one table of the platform page; a refusal (a 403 names the
// permission) is shown in the section, not as a broken page.
async function section(id, load) {
  const status = document.getElementById(id + '-status');
  try {
    await load(document.querySelector('#' + id + ' tbody'));
  } catch (err) {
    if (status) status.textContent = err.message;
    else say(err.message);
  }
}

// The platform team's changes over the files: prices, quotas, budgets.
const editPaths = { price: (k) => '/api/v1/gpu-classes/' + encodeURIComponent(k) + '/price',
  quota: (k) => '/api/v1/teams/' + encodeURIComponent(k) + '/quota', budget: (k) => '/api/v1/teams/' + encodeURIComponent(k) + '/budget',
  nodeGroup: (k) => '/api/v1/node-groups/' + encodeURIComponent(k), cluster: (k) => '/api/v1/clusters/' + encodeURIComponent(k) + '/cordon' };

async function editsInForce() {
  try { return (await api('GET', '/api/v1/platform/edits')).items; } catch (err) { return []; }
}

async function loadClasses(body) {
  const [list, edits] = await Promise.all([api('GET', '/api/v1/gpu-classes'), editsInForce()]);
  const status = document.getElementById('classes-status');
  body.replaceChildren(...list.items.map((c) => {
    const od = el('input', { type: 'number', min: '0.01', step: 'any', value: String(c.price.onDemand), 'aria-label': c.name + ' on-demand price', size: '6' });
    const spot = el('input', { type: 'number', min: '0', step: 'any', value: c.price.spot ? String(c.price.spot) : '', 'aria-label': c.name + ' spot price', size: '6' });
    const save = el('button', { type: 'button', text: 'Save', 'aria-label': 'Save the price of ' + c.name });
    save.addEventListener('click', async () => {
      try {
        const body = { onDemand: Number(od.value) };
        if (spot.value !== '') body.spot = Number(spot.value);
        await api('PUT', editPaths.price(c.name), body);
        say(c.name + ': price saved');
        await section('classes', loadClasses);
        await section('edits', loadEdits);
      } catch (err) { status.textContent = c.name + ': ' + problemLines(err).join('; '); }
    });
    const edit = edits.find((e) => e.kind === 'price' && e.key === c.name);
    return el('tr', { 'data-class': c.name }, el('td', { text: c.name }), el('td', { text: c.memoryGiB + ' GiB' }), el('td', {}, od), el('td', {}, spot),
      el('td', { text: (c.migProfiles || []).map((m) => m.name).join(', ') || '-' }),
      el('td', {}, save, edit ? el('small', { text: ' changed here by ' + (edit.byName || edit.by) }) : ''));
  }));
}

async function loadEdits(body) {
  const list = await api('GET', '/api/v1/platform/edits');
  body.replaceChildren(...list.items.map((e) => {
    const reset = el('button', { type: 'button', text: 'Reset', 'aria-label': 'Reset the ' + e.kind + ' of ' + e.key + ' to the file' });
    reset.addEventListener('click', async () => {
      try {
        await api('DELETE', editPaths[e.kind](e.key));
        say(e.kind + ' of ' + e.key + ': back to the file');
        await section('edits', loadEdits);
        await section('classes', loadClasses);
        if (e.kind === 'nodeGroup') await loadGroups(document.querySelector('#groups tbody'));
        if (e.kind === 'cluster') await section('clusters', loadClusters);
      } catch (err) { say(err.message); }
    });
    return el('tr', { 'data-kind': e.kind, 'data-key': e.key }, el('td', { text: e.kind }), el('td', { text: e.key }),
      el('td', { text: JSON.stringify(e.value) }), el('td', { text: e.byName || e.by, title: e.by }),
      el('td', { text: new Date(e.at).toLocaleString() }), el('td', {}, reset));
  }));
}

function editForms() {
  const status = document.getElementById('edits-status');
  const submit = (id, build) => {
    const form = document.getElementById(id);
    if (!form) return;
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      status.textContent = '';
      try {
        const [kind, key, body] = build(new FormData(form));
        await api('PUT', editPaths[kind](key), body);
        say(kind + ' of ' + key + ' saved');
        await section('edits', loadEdits);
      } catch (err) { status.textContent = problemLines(err).join('; '); }
    });
  };
  submit('budget-form', (f) => ['budget', f.get('team').trim(), { amount: Number(f.get('amount')), period: f.get('period'), atLimit: f.get('atLimit') }]);
  submit('quota-form', (f) => {
    const gpus = {};
    for (const part of String(f.get('gpus')).split(',')) {
      const [k, v] = part.split('=').map((x) => x.trim());
      if (k) gpus[k] = Number(v);
    }
    const body = { gpus };
    if (f.get('cohort').trim()) body.cohort = f.get('cohort').trim();
    if (String(f.get('cores')).trim()) body.cores = Number(f.get('cores'));
    return ['quota', f.get('team').trim(), body];
  });
}

// ------------------------------------------------------------ capacity

const svgNS = 'http://www.w3.org/2000/svg';
function svg(tag, attrs, ...children) {
  const e = document.createElementNS(svgNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== undefined && v !== null) e.setAttribute(k, String(v));
  for (const c of children) if (c) e.append(c);
  return e;
}

async function loadGroups(body) {
  const list = await api('GET', '/api/v1/node-groups');
  body.replaceChildren(...list.items.map((g) => {
    const st = g.state;
    let now = 'not watched (no cluster, or no Karpenter)';
    if (st) {
      now = st.nodes + ' joined' + (st.booting ? ', ' + st.booting + ' booting since ' + new Date(st.bootingSince).toLocaleTimeString() : '');
      if (st.failed) now += '; last scale-up failed: ' + st.failed;
    }
    return el('tr', { 'data-group': g.name }, el('td', { text: g.name }), el('td', { text: g.class }), el('td', { text: g.purchase }),
      el('td', { text: String(g.gpusPerNode) }), el('td', { text: g.min + '–' + g.max }),
      el('td', { text: money(g.pricePerNodeHour) + ' (' + money(g.gpuHourPrice) + ' a GPU-hour)' }),
      el('td', { text: g.warmPerDay ? 'up to ' + money(g.warmPerDay) + ' a day' : 'no' }), el('td', { text: now }));
  }));
  if (!list.items.length) document.getElementById('groups-status').textContent = 'No node groups are declared (nodeGroupsFile): the cluster\'s nodes are fixed.';
  const select = document.getElementById('group-name');
  if (select && !select.options.length) select.replaceChildren(...list.items.map((g) => el('option', { value: g.name, text: g.name })));
  return list.items;
}

// groupForm changes a node group over its file: the fields left empty stay
// as they are.
function groupForm() {
  const form = document.getElementById('group-form');
  if (!form) return;
  const status = document.getElementById('group-status');
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    status.textContent = '';
    const f = new FormData(form);
    const name = String(f.get('group'));
    const body = {};
    if (f.get('max') !== '') body.max = Number(f.get('max'));
    if (f.get('price') !== '') body.pricePerNodeHour = Number(f.get('price'));
    if (f.get('quiet') !== '') body.quietTimeSeconds = Math.round(Number(f.get('quiet')) * 60);
    if (f.get('warm') !== '') body.warmPerDay = Number(f.get('warm'));
    try {
      await api('PUT', editPaths.nodeGroup(name), body);
      status.textContent = name + ': changed';
      await loadGroups(document.querySelector('#groups tbody'));
      await section('edits', loadEdits);
    } catch (err) { status.textContent = name + ': ' + problemLines(err).join('; '); }
  });
}

// gpuCount writes a count of GPUs without trailing zeros (a MIG instance is
// a share of one).
const gpuCount = (v) => String(Math.round(v * 100) / 100);

// loadClusters fills the worker clusters' table — where each is, what it
// offers at what price, what is free there now, whether it takes new work,
// with cordon, drain and uncordon — and under it each team's GPUs in use
// on each cluster beside its quota in force and its cap there.
async function loadClusters(body) {
  const [list, edits] = await Promise.all([api('GET', '/api/v1/clusters'), editsInForce()]);
  const status = document.getElementById('clusters-status');
  const use = document.getElementById('cluster-use');
  status.textContent = list.items.length ? '' : 'No worker clusters are configured (clustersFile): Gantry drives one cluster.';
  document.getElementById('cluster-use-wrap').hidden = !list.items.length;
  const change = (c, label, method, path, done) => {
    const b = el('button', { type: 'button', text: label, 'aria-label': label + ' ' + c.name });
    b.addEventListener('click', async () => {
      try {
        await api(method, '/api/v1/clusters/' + encodeURIComponent(c.name) + path);
        say(c.name + ': ' + done);
        await section('clusters', loadClusters);
        await section('edits', loadEdits);
      } catch (err) { status.textContent = c.name + ': ' + problemLines(err).join('; '); }
    });
    return b;
  };
  body.replaceChildren(...list.items.map((c) => {
    const st = c.state;
    let now = 'not read yet';
    if (st && !st.reachable) now = 'unreachable: ' + (st.why || 'unknown');
    else if (st) now = 'answers';
    if (c.draining) now += '; draining: its work moves elsewhere';
    else if (c.cordoned) now += '; cordoned: no new work';
    let free = '-';
    if (st && st.reachable) {
      const parts = Object.keys(st.free).sort().map((k) => gpuCount(st.free[k]) + ' ' + k);
      for (const k of Object.keys(st.freeMIG || {}).sort()) {
        for (const p of Object.keys(st.freeMIG[k]).sort()) parts.push(gpuCount(st.freeMIG[k][p]) + ' × ' + p + ' of ' + k);
      }
      free = parts.join(', ') || 'none';
    }
    const where = c.region + (c.zone ? ' / ' + c.zone : '') + ', ' + c.provider +
      Object.entries(c.labels || {}).map(([k, v]) => '; ' + k + '=' + v).join('');
    const offers = c.offers.map((o) => o.class + ' ' + o.purchase + ' ' + money(o.pricePerGPUHour) + '/GPU-h' +
      (o.gpus ? ', ' + o.gpus + ' GPUs' : '') + (o.mig ? ', MIG ' + o.mig.join(' ') : ''))
      .concat(c.cpu ? ['CPU ' + c.cpu.purchase + ' $' + c.cpu.pricePerCoreHour + '/core-h' + (c.cpu.cores ? ', ' + c.cpu.cores + ' cores' : '')] : []).join('; ');
    // Uncordon undoes a cordon or drain made here; one the clusters file
    // sets stays until the file changes.
    const edited = edits.some((e) => e.kind === 'cluster' && e.key === c.name);
    const actions = [];
    if (!c.cordoned) actions.push(change(c, 'Cordon', 'PUT', '/cordon', 'cordoned'), ' ');
    if (!c.draining) actions.push(change(c, 'Drain', 'PUT', '/drain', 'draining'), ' ');
    if (edited) actions.push(change(c, 'Uncordon', 'DELETE', '/cordon', 'takes new work again'));
    else if (c.cordoned) actions.push(el('small', { text: 'cordoned by the clusters file' }));
    return el('tr', { 'data-cluster': c.name }, el('th', { scope: 'row', text: c.name }), el('td', { text: where }), el('td', { text: offers }),
      el('td', { text: free }), el('td', { text: now }), el('td', {}, ...actions));
  }));
  // Each team's use per cluster beside its quota: a row per team and
  // class it has a quota or a cap of, or uses somewhere.
  const rows = new Map();
  const key = (t, k) => t + '\u0000' + k;
  const row = (t, k) => {
    if (!rows.has(key(t, k))) rows.set(key(t, k), { team: t, cls: k });
    return rows.get(key(t, k));
  };
  for (const [t, q] of Object.entries(list.quotas)) for (const k of Object.keys(q)) row(t, k);
  for (const c of list.items) {
    for (const [t, u] of Object.entries((c.state && c.state.used) || {})) for (const k of Object.keys(u)) row(t, k);
    for (const [t, cap] of Object.entries(c.caps || {})) for (const k of Object.keys(cap)) row(t, k);
  }
  // "*" stands for every GPU class, not for CPU (cores).
  const quotaOf = (t, k) => {
    const q = list.quotas[t] || {};
    return k in q ? q[k] : k === 'CPU' ? undefined : q['*'];
  };
  const capOf = (c, t, k) => {
    const cap = (c.caps || {})[t] || {};
    return k in cap ? cap[k] : k === 'CPU' ? undefined : cap['*'];
  };
  use.querySelector('thead').replaceChildren(el('tr', {}, el('th', { scope: 'col', text: 'Team' }), el('th', { scope: 'col', text: 'GPU class' }),
    el('th', { scope: 'col', text: 'Quota' }), ...list.items.map((c) => el('th', { scope: 'col', text: 'On ' + c.name })), el('th', { scope: 'col', text: 'In all' })));
  const sorted = [...rows.values()].sort((a, b) => a.team.localeCompare(b.team) || a.cls.localeCompare(b.cls));
  use.querySelector('tbody').replaceChildren(...sorted.map((r) => {
    let all = 0;
    const cells = list.items.map((c) => {
      const used = ((c.state && c.state.used && c.state.used[r.team]) || {})[r.cls] || 0;
      all += used;
      const cap = capOf(c, r.team, r.cls);
      return el('td', { text: gpuCount(used) + (cap !== undefined ? ' (cap ' + gpuCount(cap) + ')' : '') });
    });
    const q = quotaOf(r.team, r.cls);
    return el('tr', { 'data-team': r.team, 'data-class': r.cls }, el('th', { scope: 'row', text: r.team }), el('td', { text: r.cls === '*' ? 'any other' : r.cls }),
      el('td', { text: q !== undefined ? gpuCount(q) : r.cls === 'CPU' ? 'no bound' : 'none' }), ...cells, el('td', { text: gpuCount(all) + (q !== undefined && all > q + 1e-9 ? ' (borrowing)' : '') }));
  }));
}

// forecastChart draws the forecast (line), its band (area) and what was
// wanted a day and a week before (dashed), as an SVG with a text label.
function forecastChart(f) {
  const W = 640, H = 220, L = 44, R = 10, T = 10, B = 28;
  const pts = f.points;
  const t0 = new Date(f.origin).getTime(), t1 = new Date(pts[pts.length - 1].t).getTime();
  const top = Math.max(1, f.now, ...pts.map((p) => Math.max(p.hi, p.dayAgo, p.weekAgo))) * 1.1;
  const x = (t) => L + (W - L - R) * (new Date(t).getTime() - t0) / Math.max(1, t1 - t0);
  const y = (v) => T + (H - T - B) * (1 - v / top);
  const line = (get) => 'M' + x(f.origin) + ',' + y(f.now) + pts.map((p) => ' L' + x(p.t) + ',' + y(get(p))).join('');
  const band = 'M' + x(f.origin) + ',' + y(f.now) + pts.map((p) => ' L' + x(p.t) + ',' + y(p.hi)).join('') +
    pts.slice().reverse().map((p) => ' L' + x(p.t) + ',' + y(p.lo)).join('') + ' Z';
  const seasonal = (get) => 'M' + pts.map((p) => x(p.t) + ',' + y(get(p))).join(' L');
  const label = f.class + ': ' + f.now.toFixed(1) + ' GPUs wanted now; in ' + Math.round((t1 - t0) / 3600000) + ' h ' +
    pts[pts.length - 1].gpus.toFixed(1) + ' (' + pts[pts.length - 1].lo.toFixed(1) + '–' + pts[pts.length - 1].hi.toFixed(1) + ')';
  const ticks = [0, top / 2, top].map((v) => svg('text', { x: L - 6, y: y(v) + 4, class: 'axis', 'text-anchor': 'end' }, document.createTextNode(v.toFixed(0))));
  const hours = [];
  for (let h = 0; h <= Math.round((t1 - t0) / 3600000); h++) {
    const t = t0 + h * 3600000;
    hours.push(svg('text', { x: x(t), y: H - 8, class: 'axis', 'text-anchor': 'middle' }, document.createTextNode('+' + h + 'h')));
  }
  return svg('svg', { viewBox: '0 0 ' + W + ' ' + H, role: 'img', 'aria-label': label, class: 'chart' },
    svg('title', {}, document.createTextNode(label)),
    svg('line', { x1: L, y1: y(0), x2: W - R, y2: y(0), class: 'axis-line' }),
    svg('path', { d: band, class: 'band' }),
    svg('path', { d: seasonal((p) => p.weekAgo), class: 'week' }),
    svg('path', { d: seasonal((p) => p.dayAgo), class: 'day' }),
    svg('path', { d: line((p) => p.gpus), class: 'forecast' }),
    ...ticks, ...hours);
}

async function showForecast(cls, hours) {
  const status = document.getElementById('forecast-status');
  status.textContent = '';
  try {
    const f = await api('GET', '/api/v1/capacity/forecast?class=' + encodeURIComponent(cls) + '&horizonMinutes=' + (hours * 60) + '&stepMinutes=10');
    document.getElementById('forecast-chart').replaceChildren(forecastChart(f));
    document.getElementById('forecast-caption').textContent = 'The forecast (line) with its 10th–90th percentile band, and what was wanted a day (dashed) and a week (dotted) before, from ' +
      f.launches + ' launches of ' + f.class + ' in the last eight weeks.';
    document.getElementById('forecast-figure').hidden = false;
    const body = document.querySelector('#forecast tbody');
    body.replaceChildren(...f.points.map((p) => el('tr', {}, el('td', { text: new Date(p.t).toLocaleTimeString() }), el('td', { text: p.gpus.toFixed(2) }),
      el('td', { text: p.lo.toFixed(2) + '–' + p.hi.toFixed(2) }), el('td', { text: p.dayAgo.toFixed(2) }), el('td', { text: p.weekAgo.toFixed(2) }))));
    document.getElementById('forecast-details').hidden = false;
  } catch (err) { status.textContent = err.message; }
  const advice = document.getElementById('reserved-advice');
  try {
    const r = await api('GET', '/api/v1/capacity/reserved?class=' + encodeURIComponent(cls) + '&share=0.9');
    advice.textContent = r.class + ': demand stayed at or above ' + r.level + ' GPUs in 90 % of the hours of the last ' + Math.round((new Date(r.to) - new Date(r.from)) / 86400000) +
      ' days (' + r.reservedNow + ' reserved now). ' + (r.priced ? 'Reserving ' + r.level + ' would have ' + (r.savingsPerMonth >= 0 ? 'saved ' + money(r.savingsPerMonth) : 'cost ' + money(-r.savingsPerMonth) + ' more') +
      ' a month against on-demand; ' + r.best + ' would have saved most (' + money(r.bestSavingsPerMonth) + ').' : 'Declare a reserved group with its price to see what reserving saves.');
  } catch (err) { advice.textContent = 'Reserved capacity: ' + problemLines(err).join('; '); }
}

async function capacitySection() {
  const form = document.getElementById('forecast-form');
  if (!form) return;
  const select = document.getElementById('forecast-class');
  let classes = [];
  try { classes = (await api('GET', '/api/v1/gpu-classes')).items.map((c) => c.name); } catch (err) { /* the classes section says why */ }
  let groups = [];
  try { groups = await loadGroups(document.querySelector('#groups tbody')); } catch (err) { document.getElementById('groups-status').textContent = err.message; }
  const scaled = [...new Set(groups.map((g) => g.class))];
  const order = scaled.concat(classes.filter((c) => !scaled.includes(c)));
  select.replaceChildren(...order.map((c) => el('option', { value: c, text: c })));
  form.addEventListener('submit', (ev) => { ev.preventDefault(); showForecast(select.value, Number(document.getElementById('forecast-hours').value)); });
  if (order.length) await showForecast(order[0], 2);
}

async function platformPage() {
  editForms();
  groupForm();
  await Promise.all([
    section('images', async (body) => {
      const list = await api('GET', '/api/v1/images');
      body.replaceChildren(...list.items.map((im) => {
        const signer = im.signing.keys ? im.signing.keys.map((k) => k.file + ' (' + k.fingerprint.slice(0, 16) + '…)').join(', ') :
          im.signing.keyless ? im.signing.keyless.subject + ' at ' + im.signing.keyless.issuer : '-';
        const result = el('td', { class: 'verification', text: 'not checked this session' });
        const verify = el('button', { type: 'button', 'aria-label': 'Verify ' + im.name + ' now', text: 'Verify' });
        verify.addEventListener('click', async () => {
          result.textContent = 'verifying…';
          try {
            const v = await api('POST', '/api/v1/images/' + encodeURIComponent(im.name) + '/verify', { tag: im.tags[0] });
            result.textContent = 'verified: ' + v.digest.slice(0, 19) + '… by ' + v.signer + (v.cached ? ' (cached)' : '');
          } catch (err) { result.textContent = 'refused: ' + err.message; }
        });
        result.append(' ', verify);
        return el('tr', { 'data-name': im.name }, el('td', { text: (im.title || im.name) }), el('td', { text: im.repository + ':' + im.tags.join(', ') }),
          el('td', { text: signer }), el('td', { text: (im.attestations || []).map((a) => a.predicateType).join(', ') || '-' }), result);
      }));
    }),
    section('classes', loadClasses),
    section('edits', loadEdits),
    section('clusters', loadClusters),
    capacitySection(),
    section('nodes', async (body) => {
      const list = await api('GET', '/api/v1/nodes');
      body.replaceChildren(...list.items.map((n) => el('tr', {}, el('td', { text: n.name }),
        el('td', { text: n.gpus.map((g) => g.index + ': ' + (g.model || g.gpu) + (g.migEnabled ? ' (MIG)' : '')).join('; ') }),
        el('td', { text: n.healthy ? 'healthy' : 'unhealthy: ' + n.gpus.filter((g) => !g.healthy).map((g) => 'GPU ' + g.index + (g.reason ? ' ' + g.reason : '')).join('; ') }),
        el('td', { text: new Date(n.seenAt).toLocaleString() + (n.stale ? ' (stale)' : '') }))));
      if (!list.items.length) document.getElementById('nodes-status').textContent = 'No node agent has reported yet.';
    }),
    section('fleet', async (body) => {
      const templates = await api('GET', '/api/v1/templates');
      const rows = await Promise.all(templates.items.map((v) => api('GET', '/api/v1/templates/' + encodeURIComponent(v.template.metadata.name) + '/advice')));
      rows.sort((a, b) => (b.monthlyUSD || 0) - (a.monthlyUSD || 0));
      body.replaceChildren(...rows.map((r) => el('tr', {}, el('td', { text: r.template }), el('td', { text: r.measured + ' of ' + r.launches }),
        el('td', { text: r.peakMemoryP95GiB !== undefined ? r.peakMemoryP95GiB.toFixed(1) + ' GiB' : '-' }),
        el('td', { text: (r.default || '-') + (r.recommended && r.recommended !== r.default ? ' → ' + r.recommended : '') }),
        el('td', { text: r.monthlyUSD ? money(r.monthlyUSD) : '-' }))));
    }),
    section('audit', async (body) => {
      const list = await api('GET', '/api/v1/audit?limit=50');
      body.replaceChildren(...list.items.map((a) => el('tr', {}, el('td', { text: a.seq }), el('td', { text: new Date(a.at).toLocaleString() }),
        el('td', { text: a.actorName || a.actor, title: a.actor }), el('td', { text: a.action + (a.reason ? ' — ' + a.reason : '') }), el('td', { text: a.decision + ' ' + a.status }))));
    }),
  ]);
  say('');
}

// ----------------------------------------------------------------- editor

// yaml writes a JSON value as block YAML (scalars as JSON, which YAML reads).
function yaml(v, indent) {
  indent = indent || '';
  if (Array.isArray(v)) {
    if (!v.length) return ' []';
    return v.map((x) => '\n' + indent + '-' + (x !== null && typeof x === 'object' && !Array.isArray(x) && Object.keys(x).length ? yaml(x, indent + '  ').replace(/^\n\s*/, ' ') : yaml(x, indent + '  '))).join('');
  }
  if (v !== null && typeof v === 'object') {
    const keys = Object.keys(v);
    if (!keys.length) return ' {}';
    return keys.map((k) => '\n' + indent + (/^[A-Za-z0-9_./-]+$/.test(k) ? k : JSON.stringify(k)) + ':' + yaml(v[k], indent + '  ')).join('');
  }
  if (typeof v === 'string' && /^[A-Za-z0-9_./-][A-Za-z0-9 _./:-]*$/.test(v) && !/^(true|false|null|yes|no|on|off|~|[0-9.+-]+)$/i.test(v) && !v.endsWith(' ') && !v.includes(': ')) return ' ' + v;
  return ' ' + JSON.stringify(v);
}
const toYAML = (doc) => yaml(doc).replace(/^\n/, '') + '\n';

// lineDiff is a unified-style diff of two texts (longest common subsequence).
function lineDiff(a, b) {
  const x = a.split('\n'), y = b.split('\n');
  const n = x.length, m = y.length;
  const L = Array.from({ length: n + 1 }, () => new Array(m + 1).fill(0));
  for (let i = n - 1; i >= 0; i--) for (let j = m - 1; j >= 0; j--) L[i][j] = x[i] === y[j] ? L[i + 1][j + 1] + 1 : Math.max(L[i + 1][j], L[i][j + 1]);
  const out = [];
  let i = 0, j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && x[i] === y[j]) { i++; j++; continue; }
    if (j < m && (i === n || L[i][j + 1] >= L[i + 1][j])) out.push('+ ' + y[j++]);
    else out.push('- ' + x[i++]);
  }
  return out.length ? out.join('\n') : 'no differences';
}

async function editorPage(name) {
  const q = encodeURIComponent(name);
  const source = document.getElementById('source');
  const problems = document.getElementById('problems');
  const diffBox = document.getElementById('diff');
  let versions = [];
  let editedFrom = null; // the live version the editor's text came from: a save made from it is refused once another is live
  const file = () => ({ files: [{ path: name + '.yaml', content: source.value }] });

  // check asks the server what saving would do: every problem with its
  // file:line and field path (what `gantry templates validate` says), or
  // the diff against the live version.
  let timer = null, seq = 0;
  const check = async () => {
    const mine = ++seq;
    try {
      const plan = await api('POST', '/api/v1/catalog/apply', Object.assign({ dryRun: true }, file()));
      if (mine !== seq) return;
      problems.replaceChildren(el('li', { class: 'ok', text: 'No problems.' }));
      source.removeAttribute('aria-invalid');
      const step = plan.steps.find((s) => s.name === name) || plan.steps[0];
      diffBox.textContent = !step ? '' : step.action === 'unchanged' ? 'Unchanged.' : step.action + (step.name !== name ? ' (another template: ' + step.name + ')' : '') + '\n' + (step.diff || '');
    } catch (err) {
      if (mine !== seq) return;
      problems.replaceChildren(...problemLines(err).map((line) => el('li', { class: 'field-error', text: line })));
      source.setAttribute('aria-invalid', 'true');
      diffBox.textContent = '';
    }
  };
  source.addEventListener('input', () => { clearTimeout(timer); timer = setTimeout(check, 400); });

  const loadVersions = async () => {
    versions = (await api('GET', '/api/v1/templates/' + q + '/versions')).items;
    const live = versions[versions.length - 1];
    editedFrom = live.version;
    const fromFiles = live.createdBy === 'gitops' || live.createdBy.startsWith('gantry:');
    document.getElementById('editor-origin').textContent = 'Live: version ' + live.version + ', saved ' + new Date(live.createdAt).toLocaleString() + ' by ' + live.createdBy + '. ' +
      (fromFiles ? 'This template is managed from files (' + live.createdBy + '): change it in git, or a save here is replaced by the next apply. ' : '') +
      'Templates kept in git come in with gantry templates apply -f DIR (as the person or CI token that runs it); a save here is the next version.';
    const body = document.querySelector('#versions tbody');
    body.replaceChildren(...versions.slice().reverse().map((v) => {
      const back = el('button', { type: 'button', text: 'Roll back to version ' + v.version, disabled: v === live });
      back.addEventListener('click', async () => {
        if (!confirm('Make version ' + v.version + ' the live one again (as a new version)?')) return;
        source.value = toYAML(v.template);
        await save();
      });
      return el('tr', { 'data-version': v.version }, el('td', { text: String(v.version) }), el('td', { text: new Date(v.createdAt).toLocaleString() }),
        el('td', { text: v.createdBy }), el('td', { text: (v.status || 'active') + (v.statusReason ? ': ' + v.statusReason : '') }), el('td', {}, back));
    }));
    for (const id of ['cmp-a', 'cmp-b']) {
      const sel = document.getElementById(id);
      sel.replaceChildren(...versions.map((v) => el('option', { value: v.version, text: 'version ' + v.version })));
    }
    document.getElementById('cmp-a').value = String(versions[Math.max(0, versions.length - 2)].version);
    document.getElementById('cmp-b').value = String(live.version);
    return live;
  };

  const save = async () => {
    const button = document.getElementById('save');
    button.disabled = true;
    try {
      const plan = await api('POST', '/api/v1/catalog/apply', Object.assign({ dryRun: false, expect: { [name]: editedFrom } }, file()));
      const v = (plan.versions || []).find((x) => x.name === name);
      say(v ? name + ': saved as version ' + v.version : name + ': unchanged');
      const live = await loadVersions();
      source.value = toYAML(live.template);
      await check();
    } catch (err) {
      say('Not saved: ' + err.message);
      await check();
    } finally {
      button.disabled = false;
    }
  };
  document.getElementById('editor').addEventListener('submit', (ev) => { ev.preventDefault(); save(); });

  document.getElementById('compare').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const a = versions.find((v) => String(v.version) === document.getElementById('cmp-a').value);
    const b = versions.find((v) => String(v.version) === document.getElementById('cmp-b').value);
    document.getElementById('version-diff').textContent = lineDiff(toYAML(a.template), toYAML(b.template));
  });
  document.getElementById('preview-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const out = document.getElementById('objects');
    try {
      const r = await api('POST', '/api/v1/templates/' + q + '/render', { team: document.getElementById('preview-team').value, source: source.value });
      out.textContent = r.objects.map((o) => toYAML(o)).join('---\n');
    } catch (err) {
      out.textContent = problemLines(err).join('\n');
    }
  });

  const live = await loadVersions();
  source.value = toYAML(live.template);
  await check();
}

// ------------------------------------------------------------------- main

(async function () {
  const page = document.body.dataset.page, param = document.body.dataset.param;
  try {
    if (page === 'catalog') await catalogPage();
    else if (page === 'launch') await launchPage(param);
    else if (page === 'workloads') await workloadsPage();
    else if (page === 'workload') await workloadPage(param);
    else if (page === 'history') await historyPage();
    else if (page === 'trials') await trialsPage(param);
    else if (page === 'tokens') await tokensPage();
    else if (page === 'team') await teamPage(param);
    else if (page === 'platform') await platformPage();
    else if (page === 'editor') await editorPage(param);
  } catch (err) {
    say(err.message);
  }
})();

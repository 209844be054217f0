// The PruneX dashboard: reads pxcoordd's JSON and draws it with
// Chart.js (Debian's libjs-chart.js, served by pxcoordd under /js/). Two
// views: the overview (nodes, jobs, both by state) and a job (?job=ID or a
// job name): test accuracy against wall time and against cumulative
// inter-node bytes, inter-node bytes per iteration, the four residuals and
// both penalties per layer, mask drift and density, the phase times. While
// the job is not finished it polls every 2 s and asks only for what is new
// (the listings are paged with cursors). With more than LAYER_LINES layers a
// per-layer chart draws the band from the smallest to the largest layer, the
// median, and the TOP_LAYERS largest layers by name (with 60+ layers one line
// each is unreadable). Times are UTC, as in the logs. After drawing, every
// chart's box carries data-points="N" (points drawn), data-series="N"
// (lines), data-legend="0|1", its axes' ranges (data-x-min, data-x-max,
// data-y-min, data-y-max), its canvas an aria-label naming the series, and
// data-x-ticks and data-y-ticks (the tick values drawn), data-markers="N"
// with data-marker-x and data-marker-labels (the membership changes marked
// on the accuracy charts: a dashed vertical line with a label at the
// round boundary of each); quantities that
// start at 0 have axes from 0 and counts whole-number ticks. Every table
// cell has data-col="COLUMN", and <body>
// data-ready="1". The per-layer charts, the phases and the legends are not
// spelled here: they come from the listings' `fields` (the coordinator's
// report tables, prunex/report.h).
'use strict';

const POLL_MS = 2000;
const charts = {};

function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  return e;
}

// With a tokens file on the coordinator the API needs a bearer token: open
// the dashboard as /#token=TOKEN (the fragment never leaves the browser); it
// is kept for this tab only and removed from the address bar.
const TOKEN = (() => {
  const m = location.hash.match(/(?:^#|&)token=([^&]+)/);
  if (m) {
    sessionStorage.setItem('prunex-token', decodeURIComponent(m[1]));
    history.replaceState(null, '', location.pathname + location.search);
  }
  return sessionStorage.getItem('prunex-token');
})();

async function getJSON(url) {
  const headers = TOKEN ? {Authorization: 'Bearer ' + TOKEN} : {};
  const r = await fetch(url, {cache: 'no-store', headers});
  const body = await r.json();
  if (!r.ok) {
    const e = new Error(body.error || r.statusText);
    e.status = r.status;
    throw e;
  }
  return body;
}

// Every page of a listing, starting after `cursor`. A listing that describes
// its objects (`fields`: key, label, unit, ...) leaves the description in
// fields[key] ({key: field}).
async function getAll(url, key, cursor, fields) {
  const out = [];
  for (;;) {
    const sep = url.includes('?') ? '&' : '?';
    const page = await getJSON(url + (cursor != null ? sep + 'cursor=' + encodeURIComponent(cursor) : ''));
    out.push(...page[key]);
    if (fields && page.fields) fields[key] = Object.fromEntries(page.fields.map(f => [f.key, f]));
    if (page.next_cursor == null) return out;
    cursor = page.next_cursor;
  }
}

function fmtTime(ms) { return ms == null ? '' : new Date(ms).toISOString().replace('T', ' ').slice(0, 19) + ' UTC'; }
function fmtNum(v, d) { return v == null ? '-' : Number(v).toFixed(d); }
// An accuracy as pxctl prints it (pxctl_fmt_pct): "85.21%", "-" when not measured.
function fmtPct(v) { return v == null || v < 0 ? '-' : (100 * Number(v)).toFixed(2) + '%'; }

function table(parent, cols, rows) {
  const t = el('table');
  const hr = el('tr');
  cols.forEach(c => hr.appendChild(el('th', {}, c[0])));
  t.appendChild(hr);
  rows.forEach(r => {
    const tr = el('tr');
    cols.forEach(c => {
      const td = el('td', {'data-col': c[0]});
      const v = c[1](r);
      if (v instanceof Node) td.appendChild(v); else td.textContent = v == null ? '-' : String(v);
      tr.appendChild(td);
    });
    t.appendChild(tr);
  });
  parent.appendChild(t);
}

// A chart box: title, canvas, and the data-points attribute.
function chartBox(grid, id, title) {
  const div = el('div', {class: 'chart', id: 'chart-' + id, 'data-points': '0'});
  div.appendChild(el('h3', {}, title));
  const box = el('div', {class: 'box'});
  box.appendChild(el('canvas'));
  div.appendChild(box);
  grid.appendChild(div);
  return div;
}

const PALETTE = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2',
                 '#7f7f7f', '#bcbd22', '#17becf'];

// Vertical lines with a label (opts.markers: [{x, label}]), drawn over the
// datasets: the job's membership changes on its accuracy charts.
const MARKERS = {
  id: 'pxMarkers',
  afterDatasetsDraw(chart, args, o) {
    const x = chart.scales.x, area = chart.chartArea, ctx = chart.ctx;
    if (!x || !o || !o.markers) return;
    ctx.save();
    ctx.strokeStyle = '#d62728';
    ctx.fillStyle = '#d62728';
    ctx.setLineDash([4, 3]);
    ctx.font = '10px sans-serif';
    o.markers.forEach((m, i) => {
      const px = x.getPixelForValue(m.x);
      if (!isFinite(px) || px < area.left - 1 || px > area.right + 1) return;
      ctx.beginPath();
      ctx.moveTo(px, area.top);
      ctx.lineTo(px, area.bottom);
      ctx.stroke();
      ctx.fillText(m.label, Math.min(px + 3, area.right - ctx.measureText(m.label).width),
                   area.top + 10 + 12 * (i % 3));
    });
    ctx.restore();
  },
};

// Draws (or redraws) chart `id` with datasets [{label, data: [{x, y}], ...}].
function draw(id, type, datasets, opts) {
  const div = document.getElementById('chart-' + id);
  if (!div) return;
  let points = 0;
  datasets.forEach((d, i) => {
    d.data = d.data.filter(p => p.y != null && isFinite(p.y) && (!opts.logY || p.y > 0));
    points += d.data.length;
    const c = d.color || PALETTE[i % PALETTE.length];
    d.borderColor = c;
    d.backgroundColor = d.fillColor || c;
    d.pointRadius = d.pointRadius != null ? d.pointRadius : (d.data.length > 60 ? 0 : 2);
    d.borderWidth = 1.5;
  });
  div.setAttribute('data-points', String(points));
  let empty = div.querySelector('.empty');
  if (!points && !empty) div.querySelector('.box').appendChild(el('div', {class: 'empty'}, opts.emptyText || 'no data yet'));
  if (points && empty) empty.remove();
  const scales = {
    x: {type: opts.xType || 'linear', title: {display: true, text: opts.x}, stacked: !!opts.stacked},
    y: {type: opts.logY ? 'logarithmic' : 'linear', title: {display: true, text: opts.y}, stacked: !!opts.stacked},
  };
  // fixed ends where the quantity has them (an accuracy is in [0, 1]): with
  // one point Chart.js would otherwise centre an arbitrary range on it
  ['xMin', 'xMax', 'yMin', 'yMax'].forEach(k => {
    if (opts[k] != null) scales[k[0]][k.slice(1).toLowerCase()] = opts[k];
  });
  // a count (nodes, jobs, changed bits) has whole-number ticks
  if (opts.intY) scales.y.ticks = {precision: 0};
  if (opts.y2) scales.y2 = {type: 'linear', position: 'right', min: 0, max: 1, title: {display: true, text: opts.y2}, grid: {drawOnChartArea: false}};
  const many = datasets.length > 12;
  const markers = opts.markers || [];
  // a marker beyond the last point still shows: the x axis reaches it
  if (markers.length) scales.x.suggestedMax = Math.max(...markers.map(m => m.x));
  const config = {
    type: type,
    data: {datasets: datasets},
    options: {
      animation: false, responsive: true, maintainAspectRatio: false, parsing: true,
      interaction: {mode: 'nearest', intersect: false},
      plugins: {legend: {display: !many, labels: {boxWidth: 10, font: {size: 10}}},
                tooltip: {enabled: true}, pxMarkers: {markers: markers}},
      scales: scales,
    },
    plugins: [MARKERS],
  };
  if (charts[id]) charts[id].destroy();
  charts[id] = new Chart(div.querySelector('canvas'), config);
  // the series by name for screen readers (and tests): the legend is pixels
  div.querySelector('canvas').setAttribute('aria-label', div.querySelector('h3').textContent + ': ' +
    datasets.map(d => d.label).join(', '));
  div.setAttribute('data-series', String(datasets.length));
  // the membership changes marked (x on this chart's axis, and the label)
  div.setAttribute('data-markers', String(markers.length));
  div.setAttribute('data-marker-x', markers.map(m => String(m.x)).join(','));
  div.setAttribute('data-marker-labels', markers.map(m => m.label).join(' | '));
  div.setAttribute('data-legend', many ? '0' : '1');
  const sc = charts[id].scales;
  ['x', 'y'].forEach(a => {
    if (!sc[a] || typeof sc[a].min !== 'number') return;
    div.setAttribute('data-' + a + '-min', String(sc[a].min));
    div.setAttribute('data-' + a + '-max', String(sc[a].max));
    div.setAttribute('data-' + a + '-ticks', sc[a].ticks.map(t => t.value).join(','));
  });
}

// ---- per-layer figures -----------------------------------------------------------

const LAYER_LINES = 8;  // up to this many layers: one line each
const TOP_LAYERS = 5;   // beyond: min-max band, median, and the largest layers

function median(v) {
  const s = v.slice().sort((a, b) => a - b), m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

// Datasets for figure `key` of the layers grouped in byLayer ({layer: {name,
// rows}}); positiveOnly drops values a log axis cannot show.
function layerDatasets(byLayer, key, positiveOnly) {
  const layers = Object.keys(byLayer);
  const ok = v => v != null && isFinite(v) && (!positiveOnly || v > 0);
  const line = (k, color) => ({label: byLayer[k].name, data: byLayer[k].rows.map(l => ({x: l.iteration, y: l[key]})),
                               pointRadius: 0, color});
  if (layers.length <= LAYER_LINES) return layers.map(k => line(k));
  const byIt = new Map();
  layers.forEach(k => byLayer[k].rows.forEach(l => {
    if (!ok(l[key])) return;
    if (!byIt.has(l.iteration)) byIt.set(l.iteration, []);
    byIt.get(l.iteration).push(l[key]);
  }));
  const its = [...byIt.keys()].sort((a, b) => a - b);
  const band = f => its.map(i => ({x: i, y: f(byIt.get(i))}));
  const grey = '#9e9e9e';
  const sets = [
    {label: 'min over ' + layers.length + ' layers', data: band(v => Math.min(...v)), pointRadius: 0, color: grey},
    {label: 'max over ' + layers.length + ' layers', data: band(v => Math.max(...v)), pointRadius: 0, color: grey,
     fill: '-1', fillColor: 'rgba(158,158,158,0.25)'},
    {label: 'median', data: band(median), pointRadius: 0, color: '#000000'},
  ];
  // the largest layers at their latest iteration, by name
  const last = k => { const r = byLayer[k].rows.filter(l => ok(l[key])); return r.length ? r[r.length - 1][key] : -Infinity; };
  layers.slice().sort((a, b) => last(b) - last(a)).slice(0, TOP_LAYERS)
    .forEach((k, i) => sets.push(line(k, PALETTE[i % PALETTE.length])));
  return sets;
}

// ---- overview ------------------------------------------------------------------

async function overview(main) {
  document.getElementById('subtitle').textContent = 'cluster';
  const [nodes, jobs] = await Promise.all([getAll('/api/v1/nodes?limit=1000', 'nodes'),
                                           getJSON('/api/v1/jobs?limit=200')]);
  main.textContent = '';
  const grid = el('div', {class: 'grid'});
  main.appendChild(grid);
  chartBox(grid, 'nodes', 'Nodes by state');
  chartBox(grid, 'jobs', 'Jobs by state (latest 200)');
  const count = (rows, states) => states.map(s => ({x: s, y: rows.filter(r => r.state === s).length}));
  draw('nodes', 'bar', [{label: 'nodes', data: count(nodes, ['READY', 'BUSY', 'LOST'])}],
       {x: 'state', y: 'nodes', xType: 'category', yMin: 0, intY: true});
  draw('jobs', 'bar', [{label: 'jobs', data: count(jobs.jobs, ['PENDING', 'SCHEDULED', 'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELLED', 'TIMEOUT'])}],
       {x: 'state', y: 'jobs', xType: 'category', yMin: 0, intY: true});
  main.appendChild(el('h2', {}, 'Nodes'));
  table(main, [['name', r => r.name], ['state', r => r.state], ['job', r => r.job_id],
               ['devices', r => r.devices], ['host', r => r.hostname],
               ['last heartbeat', r => fmtTime(r.last_heartbeat_unix_ms)]], nodes);
  main.appendChild(el('h2', {}, 'Jobs'));
  table(main, [['job', r => { const a = el('a', {href: '/?job=' + encodeURIComponent(r.job_id)}, r.job_id); return a; }],
               ['user', r => r.owner || '-'],
               ['name', r => r.name], ['state', r => r.state], ['strategy', r => r.strategy],
               ['model', r => r.model], ['iteration', r => r.iteration],
               ['test acc', r => fmtPct(r.test_accuracy)], ['density', r => fmtNum(r.density, 3)],
               ['created', r => fmtTime(r.created_unix_ms)], ['reason', r => r.reason]], jobs.jobs);
  document.body.setAttribute('data-ready', '1');
  setTimeout(() => overview(main).catch(showError), 5000);
}

// ---- one job ---------------------------------------------------------------------

// The iteration and layer figures' names, labels and units come from the
// API (the coordinator's report tables): the per-layer charts are the layer
// fields marked `plot`, the phases the iteration fields in `phases`.
const label = (table, key) => ((st.fields[table] || {})[key] || {label: key}).label;
const layerKeys = () => Object.values(st.fields.layers || {}).filter(f => f.plot).map(f => f.key);
const phaseKeys = () => Object.values(st.fields.iterations || {}).filter(f => f.in === 'phases').map(f => f.key);

function jobCharts() {
  return [
    ['acc_time', 'Test accuracy vs wall time'],
    ['acc_bytes', 'Test accuracy vs cumulative inter-node bytes'],
    ['msg', 'Inter-node bytes per iteration'],
    ...layerKeys().map(k => [k, label('layers', k) + ' per layer']),
    ['drift', 'Mask drift and density'],
    ['phases', 'Phase times per iteration (rank 0)'],
  ];
}

const st = {job: null, iters: [], layers: [], fields: {}, iterCursor: null, layerCursor: null, built: false};

// The job's membership changes (the job's `memberships` other than an
// attempt's placement) as markers at the round boundary they were made at,
// the end of iteration from_iteration - 1: on the time axis when that
// iteration was reported (else when the change was made), on the bytes
// axis the inter-node bytes sent up to it. Label: "epoch 2: -n2 (lost)".
function membershipMarkers(t0) {
  const out = {time: [], bytes: []};
  const changes = (st.job.memberships || []).filter(m => m.kind !== 'placed');
  changes.forEach(m => {
    let cum = 0, at = null;
    st.iters.forEach(r => { if (r.iteration < m.from_iteration) { cum += r.bytes_inter; at = r; } });
    const who = m.nodes_out.map(n => '-' + n).concat(m.nodes_in.map(n => '+' + n)).join(' ');
    const text = 'epoch ' + m.epoch + ': ' + who + ' (' + m.kind + ')';
    const t = at && at.iteration === m.from_iteration - 1 ? at.time_unix_ms : m.time_unix_ms;
    out.time.push({x: (t - t0) / 1000, label: text});
    out.bytes.push({x: cum / 1e6, label: text});
  });
  return out;
}

function drawJob() {
  const job = st.job, it = st.iters;
  const t0 = job.scheduled_unix_ms || job.created_unix_ms;
  let cum = 0;
  const accT = [], accB = [], msg = [], dense = [], drift = [], dens = [];
  it.forEach(r => {
    cum += r.bytes_inter;
    if (r.test_accuracy != null) {
      accT.push({x: (r.time_unix_ms - t0) / 1000, y: r.test_accuracy});
      accB.push({x: cum / 1e6, y: r.test_accuracy});
    }
    msg.push({x: r.iteration, y: r.bytes_inter / 1e6});
    dense.push({x: r.iteration, y: r.bytes_inter_dense / 1e6});
    drift.push({x: r.iteration, y: r.mask_drift});
    dens.push({x: r.iteration, y: r.density});
  });
  const acc = {y: 'accuracy', yMin: 0, yMax: 1, xMin: 0};
  const L = k => label('iterations', k);
  const mk = membershipMarkers(t0);
  draw('acc_time', 'line', [{label: L('test_accuracy'), data: accT}],
       {...acc, x: 'seconds since the job started', markers: mk.time});
  draw('acc_bytes', 'line', [{label: L('test_accuracy'), data: accB}],
       {...acc, x: 'inter-node MB (cumulative)', markers: mk.bytes});
  draw('msg', 'line', [{label: L('bytes_inter'), data: msg}, {label: L('bytes_inter_dense'), data: dense}],
       {x: 'iteration', y: 'MB per iteration', xMin: 0, yMin: 0});
  const byLayer = {};
  st.layers.forEach(l => { (byLayer[l.layer] = byLayer[l.layer] || {name: l.name, rows: []}).rows.push(l); });
  const layerSets = key => layerDatasets(byLayer, key, true);
  const noLayers = job.strategy && job.strategy !== 'hsadmm' && job.strategy !== 'hsadmm-flat'
    ? 'no per-layer figures for ' + job.strategy : 'no data yet';
  layerKeys().forEach(k =>
    draw(k, 'line', layerSets(k), {x: 'iteration', y: k + ' (log)', logY: true, xMin: 0, emptyText: noLayers}));
  draw('drift', 'line', [{label: L('mask_drift'), data: drift, yAxisID: 'y'},
                         {label: L('density'), data: dens, yAxisID: 'y2'}],
       {x: 'iteration', y: 'changed mask bits', y2: 'kept fraction', xMin: 0, yMin: 0, intY: true});
  const withPh = it.filter(r => r.phases);
  draw('phases', 'bar', phaseKeys().map(p => ({label: L(p), data: withPh.map(r => ({x: r.iteration, y: r.phases[p]}))})),
       {x: 'iteration', y: 'seconds', stacked: true, yMin: 0, emptyText: 'no phase times reported'});
}

function summary(main) {
  let s = document.getElementById('summary');
  if (!s) { s = el('div', {id: 'summary'}); main.insertBefore(s, main.firstChild); }
  s.textContent = '';
  const j = st.job, last = st.iters[st.iters.length - 1];
  const t0 = j.scheduled_unix_ms || j.created_unix_ms;
  const end = j.finished_unix_ms || (last ? last.time_unix_ms : t0);
  table(s, [['job', r => r.job_id], ['user', r => r.owner || '-'], ['name', r => r.name], ['state', r => r.state],
            ['strategy', r => r.strategy], ['model', r => r.model], ['dataset', r => r.dataset],
            ['nodes x workers', r => r.nodes + ' x ' + r.workers_per_node],
            ['membership', r => r.membership_epoch ? 'epoch ' + r.membership_epoch + ': ' + r.member_nodes + ' nodes' : '-'],
            ['iteration', r => (r.iteration == null ? '-' : r.iteration) + (r.max_iterations ? ' / ' + r.max_iterations : '')],
            ['test acc', r => fmtPct(r.test_accuracy)], ['density', r => fmtNum(r.density, 3)],
            ['wall', r => fmtNum((end - t0) / 1000, 1) + ' s'],
            ['inter MB', r => fmtNum(r.bytes_inter / 1e6, 2)], ['reason', r => r.reason]], [j]);
  // a job running (or that ran) without a usable checkpoint says so
  if (j.checkpoint_problem)
    s.appendChild(el('p', {class: 'warning', id: 'checkpoint-problem'}, 'checkpoints: ' + j.checkpoint_problem));
}

async function jobView(main, ref) {
  st.job = await getJSON('/api/v1/jobs/' + encodeURIComponent(ref));
  const id = encodeURIComponent(st.job.job_id);
  const newIters = await getAll('/api/v1/jobs/' + id + '/iterations?limit=5000', 'iterations', st.iterCursor, st.fields);
  const newLayers = await getAll('/api/v1/jobs/' + id + '/layers?limit=20000', 'layers', st.layerCursor, st.fields);
  st.iters.push(...newIters);
  st.layers.push(...newLayers);
  if (st.iters.length) st.iterCursor = String(st.iters[st.iters.length - 1].iteration);
  if (st.layers.length) { const l = st.layers[st.layers.length - 1]; st.layerCursor = l.iteration + ':' + l.layer; }
  document.getElementById('subtitle').textContent = st.job.job_id + ' (' + st.job.name + ')';
  if (!st.built) {
    main.textContent = '';
    const grid = el('div', {class: 'grid'});
    main.appendChild(grid);
    jobCharts().forEach(c => chartBox(grid, c[0], c[1]));
    st.built = true;
  }
  summary(main);
  drawJob();
  document.body.setAttribute('data-ready', '1');
  const live = ['PENDING', 'SCHEDULED', 'RUNNING'].includes(st.job.state);
  document.getElementById('status').textContent = live ? 'live, every ' + POLL_MS / 1000 + ' s' : st.job.state;
  if (live) setTimeout(() => jobView(main, ref).catch(showError), POLL_MS);
}

// A coordinator with a tokens file answers 401 without a token (or with
// one it does not know): the page says how to give one.
function tokenHelp() {
  const here = location.origin + location.pathname + location.search;
  return TOKEN ? 'the coordinator did not accept the token this tab holds: open ' + here +
                 '#token=TOKEN with a user or admin token of its tokens file'
               : 'this coordinator needs a token: open ' + here + '#token=TOKEN with a user or ' +
                 'admin token of its tokens file (what follows # is not sent to the server; ' +
                 'the page keeps the token for this tab only)';
}

function showError(e) {
  const s = document.getElementById('status');
  s.textContent = 'error: ' + e.message;
  s.className = 'error';
  document.body.setAttribute('data-error', e.message);
  if (e.status === 401 && !document.getElementById('need-token')) {
    const main = document.getElementById('main');
    main.insertBefore(el('p', {class: 'error', id: 'need-token'}, tokenHelp()), main.firstChild);
  }
}

function start() {
  const main = document.getElementById('main');
  if (typeof Chart === 'undefined') {
    showError(new Error('Chart.js did not load (is libjs-chart.js installed, --http-js right?)'));
    return;
  }
  const job = new URLSearchParams(location.search).get('job');
  (job ? jobView(main, job) : overview(main)).catch(showError);
}

start();

"use strict";
// edgetune dashboard: one page per hash route, each polling the read-only JSON API.

const page = document.getElementById("page");
const statusLine = document.getElementById("status");
let pollMs = 1000;
let timer = null;
let routeId = 0;
let runVersion = null;
let taskCount = -1;

function esc(s) {
  return String(s ?? "").replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
}
function ms(s) { return s == null ? "-" : (s * 1e3).toPrecision(4) + " ms"; }
function link(route, path, text) { return `<a href="#/${route}?path=${encodeURIComponent(path)}">${esc(text)}</a>`; }
function short(path) { const parts = path.split("/"); return parts.slice(-3).join("/"); }

async function api(url) {
  const response = await fetch(url, {cache: "no-store"});
  const body = await response.json();
  if (!response.ok) { throw new Error(body.error || response.statusText); }
  return body;
}

function parseRoute() {
  const hash = location.hash.replace(/^#\/?/, "");
  const [name, query] = hash.split("?");
  return {name: name || "runs", params: new URLSearchParams(query || "")};
}

async function tick(id) {
  const {name, params} = parseRoute();
  const render = {runs, run, compare, boards, exports, export: exportPage}[name] || runs;
  try {
    await render(params, id);
    if (id === routeId) { statusLine.textContent = "updated " + new Date().toLocaleTimeString(); }
  } catch (err) {
    if (id === routeId) { statusLine.textContent = ""; showError(err.message); }
  }
}

function showError(message) {
  let box = document.getElementById("page-error");
  if (!box) { box = document.createElement("p"); box.id = "page-error"; box.className = "err"; page.prepend(box); }
  box.textContent = message;
}

function route() {
  routeId += 1;
  runVersion = null;
  taskCount = -1;
  page.innerHTML = "";
  clearInterval(timer);
  const id = routeId;
  tick(id);
  timer = setInterval(() => tick(id), pollMs);
}

// ---- runs ---------------------------------------------------------------------------------------
async function runs(params, id) {
  const data = await api("/api/runs");
  if (id !== routeId) { return; }
  const cards = data.runs.map((r) => {
    const wl = r.workloads.length > 3 ? r.workloads.slice(0, 3).join(", ") + ` (+${r.workloads.length - 3})` : r.workloads.join(", ");
    const err = r.error ? `<p class="err">${esc(r.error)}</p>` : "";
    const cut = r.truncated ? `<p class="err">last line truncated (the writer stopped mid-record)</p>` : "";
    return `<div class="card${r.error ? " error" : ""}" data-path="${esc(r.path)}">
      <h3>${link("run", r.path, short(r.path))}</h3>
      <span class="state ${esc(r.state)}">${esc(r.state)}</span>
      <span class="muted">board ${esc(r.board)}${r.network ? " · network " + esc(r.network) : ""}</span>
      <p>${esc(wl)}</p>
      <p>tuners ${esc(r.tuners.join(", ") || "-")} · <span class="trials">${r.trials}</span> trials (${r.invalid} invalid) · best ${ms(r.best_s)}</p>
      ${err}${cut}</div>`;
  });
  page.innerHTML = `<h2>Runs</h2><div class="cards">${cards.join("") || "<p>no tuning log under the given folders yet</p>"}</div>`;
}

// ---- one run ------------------------------------------------------------------------------------
function skeleton(data) {
  const net = data.network_view ? `<h3>Network</h3><p class="muted" id="net-note"></p>
    <div class="charts"><div class="chart" id="net-total"></div><div class="chart" id="net-trials"></div></div>` : "";
  const tasks = data.tasks.map((t, i) => `<section class="task"><h3 id="task-title-${i}"></h3>
    <p id="task-info-${i}"></p>
    <div class="charts"><div class="chart" id="trials-${i}"></div><div class="chart" id="time-${i}"></div>
    <div class="chart" id="roof-${i}"></div></div><div id="top-${i}"></div></section>`);
  page.innerHTML = `<h2 id="run-title"></h2><p id="run-info"></p><p id="run-error" class="err"></p>${net}${tasks.join("")}`;
}

async function run(params, id) {
  const path = params.get("path");
  const data = await api(`/api/run?path=${encodeURIComponent(path)}` + (runVersion ? `&version=${encodeURIComponent(runVersion)}` : ""));
  if (id !== routeId || data.unchanged) { return; }
  runVersion = data.version;
  if (data.tasks.length !== taskCount || !document.getElementById("run-title")) { skeleton(data); taskCount = data.tasks.length; }
  document.getElementById("run-title").textContent = short(data.path);
  const tuners = Object.entries(data.tuner_counts).map(([k, v]) => `${k} (${v})`).join(", ");
  document.getElementById("run-info").innerHTML = `<span class="state ${esc(data.state)}">${esc(data.state)}</span>
    board ${esc(data.board)} · tuners ${esc(tuners || "-")} · ${data.trials} trials, ${data.invalid} invalid
    <br><span class="muted">template: <code>${esc(JSON.stringify((data.task || {}).template || ((data.task || {}).tasks || [{}])[0].template || {}))}</code></span>`;
  document.getElementById("run-error").textContent = (data.error || "") + (data.truncated ? " last line truncated" : "");
  if (data.network_view) { drawNetwork(data); }
  data.tasks.forEach((t, i) => drawTask(t, i));
}

const layoutBase = {margin: {l: 60, r: 20, t: 36, b: 44}, showlegend: true, legend: {orientation: "h", y: -0.25}};
const plotConfig = {displaylogo: false, responsive: true, displayModeBar: false};

function drawNetwork(data) {
  const nv = data.network_view;
  document.getElementById("net-note").textContent = nv.note || "each task's best times how often the network runs it";
  Plotly.react("net-total", [{x: nv.curve.elapsed_s, y: nv.curve.seconds.map((s) => s * 1e3), mode: "lines+markers",
    line: {shape: "hv"}, name: "network total", meta: "network", text: nv.curve.trials.map((n) => `after ${n} trials`)}],
  {...layoutBase, title: {text: "network total over time (once every task has a valid trial)"},
    xaxis: {title: {text: "seconds since the first record"}},
    yaxis: {title: {text: "total latency (ms)"}, rangemode: "tozero"}}, plotConfig);
  Plotly.react("net-trials", [{x: data.tasks.map((t) => t.label), y: nv.trials_per_task, type: "bar", name: "trials",
    meta: "per-task"}],
  {...layoutBase, title: {text: "trials the scheduler gave each task"}, yaxis: {title: {text: "trials"}, rangemode: "tozero"}},
  plotConfig);
}

function drawTask(t, i) {
  document.getElementById(`task-title-${i}`).textContent = `${t.label} — ${t.spec}`;
  const errs = Object.entries(t.errors).map(([k, v]) => `${k}: ${v}`).join(", ");
  document.getElementById(`task-info-${i}`).innerHTML = `${t.trials} trials, ${t.valid} valid, best ${ms(t.best_s)}` +
    (errs ? ` · invalid by kind: ${esc(errs)}` : "") + (t.points.downsampled ? ` · <span class="muted">scatter downsampled (every best-so-far point kept)</span>` : "");
  const trials = [
    {x: t.points.trial, y: t.points.seconds.map((s) => s * 1e3), mode: "markers", name: "valid trial",
      marker: {size: 5, color: "#4c78a8", opacity: 0.6}, meta: "trials"},
    {x: t.best_curve.trial, y: t.best_curve.seconds.map((s) => s * 1e3), mode: "lines", line: {shape: "hv", color: "#e45756"},
      name: "best so far", meta: "best"},
    {x: t.invalid_points.trial, y: t.invalid_points.error, mode: "markers", yaxis: "y2", name: "invalid trial",
      marker: {symbol: "x", size: 6, color: "#b00"}, meta: "invalid"},
  ];
  Plotly.react(`trials-${i}`, trials, {...layoutBase, title: {text: "latency per trial"},
    xaxis: {title: {text: "trial"}}, yaxis: {title: {text: "latency (ms, log)"}, type: "log", domain: [0.3, 1]},
    yaxis2: {type: "category", domain: [0, 0.2], title: {text: "invalid"}}}, plotConfig);
  Plotly.react(`time-${i}`, [{x: t.best_curve.elapsed_s, y: t.best_curve.seconds.map((s) => s * 1e3), mode: "lines+markers",
    line: {shape: "hv"}, name: "best so far", meta: "best-time"}],
  {...layoutBase, title: {text: "best latency against time"}, xaxis: {title: {text: "seconds since the first record"}},
    yaxis: {title: {text: "latency (ms)"}, rangemode: "tozero"}}, plotConfig);
  drawRoofline(t, i);
  const rows = t.top.map((c) => `<tr><td>${c.trial}</td><td>${c.index ?? "-"}</td><td>${ms(c.seconds)}</td><td>${esc(c.tuner)}</td>
    <td><code>${esc(JSON.stringify(c.config))}</code></td></tr>`);
  document.getElementById(`top-${i}`).innerHTML = rows.length ? `<table><tr><th>trial</th><th>config #</th><th>latency</th>
    <th>tuner</th><th>knobs</th></tr>${rows.join("")}</table>` : "<p>no valid config yet</p>";
}

function drawRoofline(t, i) {
  const r = t.roofline;
  if (!r) { document.getElementById(`roof-${i}`).textContent = "no roofline: the workload has no FLOP count"; return; }
  const traces = [{x: r.ai, y: r.gflops, mode: "markers", name: "measured configs",
    marker: {size: 5, color: "#4c78a8", opacity: 0.6}, meta: "roofline"}];
  const xs = r.ai.concat([r.compulsory_ai]);
  let title = "roofline (no peak known for this board)";
  if (r.roof) {
    const lo = Math.min(...xs, r.roof.ridge) / 4;
    const hi = Math.max(...xs, r.roof.ridge) * 4;
    traces.push({x: [lo, r.roof.ridge, hi], y: [lo * r.roof.bandwidth_gbs, r.roof.peak_gflops, r.roof.peak_gflops],
      mode: "lines", line: {color: "#333", dash: "dash"}, name: "roof", meta: "roof"});
    title = `roofline: ${r.roof.peak_gflops.toPrecision(3)} GFLOP/s, ${r.roof.bandwidth_gbs.toPrecision(3)} GB/s`;
  }
  Plotly.react(`roof-${i}`, traces, {...layoutBase, title: {text: title},
    xaxis: {type: "log", title: {text: `FLOP per byte (${r.traffic} DRAM traffic, log)`}},
    yaxis: {type: "log", title: {text: "GFLOP/s (log)"}},
    annotations: r.roof ? [{text: esc(r.roof.source), showarrow: false, xref: "paper", yref: "paper", x: 0, y: 1.0,
      xanchor: "left", font: {size: 9, color: "#666"}}] : []}, plotConfig);
}

// ---- compare ------------------------------------------------------------------------------------
async function compare(params, id) {
  const path = params.get("path");
  if (!path) {
    const data = await api("/api/benches");
    if (id !== routeId) { return; }
    page.innerHTML = `<h2>Compare tuners</h2><p>bench results under the given folders:</p><ul>` +
      (data.benches.map((p) => `<li>${link("compare", p, short(p))}</li>`).join("") || "<li>none</li>") + "</ul>";
    return;
  }
  if (document.getElementById("compare-title")) { return; }   // a bench result does not change while shown
  const data = await api(`/api/compare?path=${encodeURIComponent(path)}`);
  if (id !== routeId) { return; }
  page.innerHTML = `<h2 id="compare-title">${esc(short(data.path))}</h2>` + data.workloads.map((w, i) => `<section class="task">
    <h3>${esc(w.workload)}</h3><div class="charts"><div class="chart" id="cmp-${i}"></div></div><div id="cmp-table-${i}"></div></section>`).join("");
  data.workloads.forEach((w, i) => {
    const traces = [];
    w.tuners.forEach((t, k) => {
      const x = t.median.map((_, j) => j + 1);
      const color = ["#4c78a8", "#e45756", "#54a24b", "#f58518", "#b279a2", "#72b7b2", "#9d755d"][k % 7];
      traces.push({x, y: t.low.map((s) => s && s * 1e3), mode: "lines", line: {width: 0, color}, showlegend: false, hoverinfo: "skip"});
      traces.push({x, y: t.high.map((s) => s && s * 1e3), mode: "lines", line: {width: 0, color}, fill: "tonexty",
        fillcolor: color + "33", showlegend: false, hoverinfo: "skip"});
      traces.push({x, y: t.median.map((s) => s && s * 1e3), mode: "lines", line: {color}, name: `${t.tuner} (median of ${t.seeds})`});
    });
    if (w.optimum_s) {
      const n = Math.max(...w.tuners.map((t) => t.median.length));
      traces.push({x: [1, n], y: [w.optimum_s * 1e3, w.optimum_s * 1e3], mode: "lines", line: {dash: "dash", color: "#333"}, name: "optimum"});
    }
    Plotly.react(`cmp-${i}`, traces, {...layoutBase, title: {text: "best so far: median over seeds, min-max band"},
      xaxis: {title: {text: "trial"}}, yaxis: {title: {text: "latency (ms)"}}}, plotConfig);
    document.getElementById(`cmp-table-${i}`).innerHTML = `<table><tr><th>tuner</th><th>seeds</th><th>median best</th>
      <th>min - max</th><th>reached the optimum</th><th>median trials to it</th></tr>` + w.tuners.map((t) => `<tr>
      <td>${esc(t.tuner)}</td><td>${t.seeds}</td><td>${ms(t.best_median_s)}</td><td>${ms(t.best_min_s)} - ${ms(t.best_max_s)}</td>
      <td>${w.optimum_s ? t.reached_optimum + "/" + t.seeds : "optimum unknown"}</td><td>${t.trials_to_optimum_median ?? "-"}</td></tr>`).join("") + "</table>";
  });
}

// ---- boards -------------------------------------------------------------------------------------
async function boards(params, id) {
  const data = await api("/api/boards");
  if (id !== routeId) { return; }
  const rows = data.boards.map((b) => `<tr><td>${esc(b.name)}</td><td>${esc(b.type)}</td><td>${esc(b.host ?? "-")}</td>
    <td>${esc(b.key)}</td><td>${esc(b.tags.join(", "))}</td></tr>`).join("");
  const t = data.tracker;
  const queues = t.running ? Object.entries((t.summary || {}).queue_info || {}).map(([k, q]) =>
    `<tr><td>${esc(k)}</td><td>${q.free}</td><td>${q.pending}</td></tr>`).join("") : "";
  const health = data.health.map((h) => `<tr><td>${esc(h.name)}</td><td>${h.reachable}</td><td>${h.agent_up}</td>
    <td>${h.registered}</td><td>${esc(h.queue)}</td><td>${esc(h.note)}</td></tr>`).join("");
  page.innerHTML = `<h2>Boards</h2>${data.inventory_error ? `<p class="err">${esc(data.inventory_error)}</p>` : ""}
    <table><tr><th>name</th><th>type</th><th>host</th><th>rpc key</th><th>tags</th></tr>${rows}</table>
    <h3>Tracker</h3>${t.running ? `<p>on ${esc(t.host)}:${esc(t.port)}</p><table><tr><th>key</th><th>free</th><th>pending</th></tr>${queues}</table>`
      : `<p>${esc(t.error || "no tracker running (edgetune tracker start)")}</p>`}
    <h3>Agents</h3>${health ? `<table><tr><th>board</th><th>reachable</th><th>agent up</th><th>registered</th><th>queue</th><th>note</th></tr>${health}</table>`
      : "<p>no provisioned board</p>"}`;
}

// ---- exports ------------------------------------------------------------------------------------
async function exports(params, id) {
  const data = await api("/api/exports");
  if (id !== routeId) { return; }
  page.innerHTML = `<h2>Exports</h2><div class="cards">` + (data.exports.map((e) => e.error
    ? `<div class="card error"><h3>${esc(short(e.path))}</h3><p class="err">${esc(e.error)}</p></div>`
    : `<div class="card"><h3>${link("export", e.path, short(e.path))}</h3><p>${esc(e.kind)} for ${esc(e.board)} (${esc(e.runs_on)})</p>
       <p>${esc(Object.entries(e.schedules).map(([k, v]) => `${k}: ${v}`).join(", "))}</p>
       <p class="muted">${e.last_run ? "run before" : "not run yet"} · ${esc(e.created)}</p></div>`).join("") || "<p>no export under the given folders</p>") + "</div>";
}

async function exportPage(params, id) {
  const data = await api(`/api/export?path=${encodeURIComponent(params.get("path"))}`);
  if (id !== routeId) { return; }
  const rows = data.layers.map((l) => `<tr><td>${esc(l.name)}</td><td><code>${esc(l.workload ?? "-")}</code></td>
    <td>${esc(l.schedule)}</td><td>${esc((l.epilogue || []).join(", "))}</td><td>${esc(l.why)}</td></tr>`).join("");
  const last = data.last_run ? `<p>last run on ${esc(data.last_run.board)} at ${new Date(data.last_run.when * 1000).toLocaleString()}</p>
    <pre>${esc(JSON.stringify(data.last_run.result, null, 1).slice(0, 4000))}</pre>` : "<p>not run yet (edgetune run)</p>";
  const log = data.log ? ` (${link("run", data.log, "its log")})` : "";
  page.innerHTML = `<h2>${esc(short(data.path))}</h2><p>${esc(data.kind)} for ${esc(data.board)}, tuned on ${esc(data.tuned_on.board)}${log}</p>
    <table><tr><th>layer</th><th>workload</th><th>runs as</th><th>epilogue</th><th>why</th></tr>${rows}</table><h3>Last run</h3>${last}`;
}

api("/api/config").then((cfg) => { pollMs = cfg.poll_ms; }).catch(() => {}).finally(() => {
  window.addEventListener("hashchange", route);
  route();
});

// kstreamd web UI: polls the daemon's JSON API (/api/v1/job, /checkpoints,
// /rules) and draws the job graph, checkpoint history, restarts, rules and
// cluster members. Plain JavaScript and SVG, no dependencies, no build step.
// Every value from the API is put in the page as text (textContent), never
// as markup.
"use strict";

(function () {
  const SVG = "http://www.w3.org/2000/svg";
  const TOKEN_KEY = "kstreamd-api-token";
  const params = new URLSearchParams(location.search);
  const refreshMs = Math.max(250, Number(params.get("refresh")) || 1000);
  const api = new URL("../api/v1/", location.href);

  let token = sessionStorage.getItem(TOKEN_KEY) || "";
  let selected = "";   // the vertex whose subtasks are listed
  let lastJob = null;

  const $ = (id) => document.getElementById(id);

  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v; else e.setAttribute(k, v);
    }
    for (const c of children) e.append(c instanceof Node ? c : String(c));
    return e;
  }

  function svg(tag, attrs, text) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    if (text !== undefined) e.textContent = text;
    return e;
  }

  // ---- formatting ----

  function rate(v) {
    if (v === undefined || v === null) return "–";
    if (v >= 1e6) return (v / 1e6).toFixed(2) + " M/s";
    if (v >= 1e3) return (v / 1e3).toFixed(1) + " k/s";
    return v.toFixed(v < 10 ? 1 : 0) + " /s";
  }
  function bytes(v) {
    if (v === undefined || v === null) return "–";
    const u = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (v >= 1024 && i < u.length - 1) { v /= 1024; i++; }
    return (i ? v.toFixed(1) : v) + " " + u[i];
  }
  function ms(v) {
    if (v === undefined || v === null) return "–";
    return v >= 1000 ? (v / 1000).toFixed(2) + " s" : v + " ms";
  }
  function pct(msPerS) { return Math.round((msPerS || 0) / 10) + "%"; }
  function time(t) {
    if (!t || t.startsWith("0001-")) return "–";
    const d = new Date(t);
    return isNaN(d) ? t : d.toLocaleString();
  }
  function watermark(w) {
    if (w === undefined || w === null) return "no watermark";
    const lag = Date.now() - w;
    const d = new Date(w);
    let s = "wm " + (isNaN(d) ? w : d.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z"));
    if (!isNaN(d) && lag >= 0) s += " (−" + (lag < 1000 ? lag + " ms" : (lag / 1000).toFixed(1) + " s") + ")";
    return s;
  }

  // ---- API ----

  class HTTPError extends Error {
    constructor(status, msg) { super(msg); this.status = status; }
  }

  async function call(method, path, body) {
    const headers = {};
    if (token) headers["Authorization"] = "Bearer " + token;
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const ctl = new AbortController();
    const timer = setTimeout(() => ctl.abort(), method === "GET" ? 10000 : 600000);
    try {
      const resp = await fetch(new URL(path, api), {
        method, headers, body: body === undefined ? undefined : JSON.stringify(body),
        signal: ctl.signal, cache: "no-store",
      });
      let data = null;
      try { data = await resp.json(); } catch (e) { data = null; }
      if (!resp.ok) throw new HTTPError(resp.status, (data && data.error) || resp.status + " " + resp.statusText);
      return data;
    } finally {
      clearTimeout(timer);
    }
  }

  // ---- job graph ----

  // layout places each vertex in the column of its longest path from a
  // source (edges give the order; without edges: sources, operators,
  // sinks) and stacks the vertices of a column.
  function layout(ops, edges) {
    const ids = ops.map((o) => o.id || o.name);
    const depth = new Map(ids.map((id) => [id, 0]));
    if (edges.length) {
      for (let pass = 0; pass < ids.length; pass++) {
        let changed = false;
        for (const e of edges) {
          if (!depth.has(e.from) || !depth.has(e.to)) continue;
          const d = depth.get(e.from) + 1;
          if (d > depth.get(e.to)) { depth.set(e.to, d); changed = true; }
        }
        if (!changed) break;
      }
    } else {
      ops.forEach((o, i) => depth.set(ids[i], o.kind === "source" ? 0 : o.kind === "sink" ? 2 : 1));
    }
    const cols = new Map();
    ops.forEach((o, i) => {
      const d = depth.get(ids[i]);
      if (!cols.has(d)) cols.set(d, []);
      cols.get(d).push(i);
    });
    return { ids, depth, cols };
  }

  // fill is the vertex colour: blue when idle, red as the busiest subtask
  // nears 1000 ms/s, grey as backpressure does (Flink's web UI colours).
  function fill(o) {
    const busy = Math.min(1, (o.busy_ms_per_s || 0) / 1000);
    const bp = Math.min(1, (o.backpressured_ms_per_s || 0) / 1000);
    if (bp > busy) {
      const l = Math.round(92 - 52 * bp);
      return "hsl(0, 0%, " + l + "%)";
    }
    return "hsl(" + Math.round(210 - 210 * busy) + ", 75%, " + Math.round(90 - 22 * busy) + "%)";
  }

  const W = 240, H = 118, GX = 80, GY = 26, PAD = 16;
  let graphKey = "";       // the drawn graph's structure: redrawn only when it changes
  const vertexEls = new Map(); // vertex id -> its SVG group

  // drawGraph draws the graph's structure (vertices and edges) when it is
  // new or changed, then updates each vertex's figures in place, so a
  // refresh keeps the focus and a click on a vertex.
  function drawGraph(job) {
    const ops = job.operators || [];
    const edges = job.edges || [];
    const { ids, cols } = layout(ops, edges);
    const key = JSON.stringify([ops.map((o, i) => [ids[i], o.name, o.kind, o.type, o.topic, o.parallelism]), edges]);
    if (key !== graphKey) {
      graphKey = key;
      buildGraph(ops, edges, ids, cols);
    }
    ops.forEach((o, i) => {
      const g = vertexEls.get(ids[i]);
      if (g) fillVertex(g, o, ids[i]);
    });
    drawSubtasks(ops.find((o, i) => ids[i] === selected));
  }

  function buildGraph(ops, edges, ids, cols) {
    const ncol = Math.max(...cols.keys(), 0) + 1;
    const nrow = Math.max(...[...cols.values()].map((c) => c.length), 1);
    const width = PAD * 2 + ncol * W + (ncol - 1) * GX;
    const height = PAD * 2 + nrow * H + (nrow - 1) * GY;
    const pos = new Map();
    for (const [d, members] of cols) {
      const top = PAD + ((nrow - members.length) * (H + GY)) / 2;
      members.forEach((i, k) => pos.set(ids[i], { x: PAD + d * (W + GX), y: top + k * (H + GY) }));
    }
    const root = svg("svg", { width, height, viewBox: "0 0 " + width + " " + height, role: "img", "aria-label": "job graph" });
    const defs = svg("defs");
    const marker = svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 8, markerHeight: 8, orient: "auto-start-reverse" });
    marker.append(svg("path", { d: "M 0 0 L 10 5 L 0 10 z", fill: "#555" }));
    defs.append(marker);
    root.append(defs);
    for (const e of edges) {
      const a = pos.get(e.from), b = pos.get(e.to);
      if (!a || !b) continue;
      const x1 = a.x + W, y1 = a.y + H / 2, x2 = b.x, y2 = b.y + H / 2;
      const mx = (x1 + x2) / 2;
      const g = svg("g", { class: "edge", "data-from": e.from, "data-to": e.to, "data-kind": e.kind });
      g.append(svg("path", { d: `M ${x1} ${y1} C ${mx} ${y1}, ${mx} ${y2}, ${x2} ${y2}`, class: "edge-line " + (e.kind || ""), "marker-end": "url(#arrow)" }));
      g.append(svg("text", { x: mx, y: (y1 + y2) / 2 - 6, class: "edge-label", "text-anchor": "middle" }, e.kind || ""));
      root.append(g);
    }
    vertexEls.clear();
    ops.forEach((o, i) => {
      const id = ids[i];
      const p = pos.get(id);
      const g = svg("g", { class: "vertex", "data-id": id, "data-kind": o.kind, transform: `translate(${p.x},${p.y})`, tabindex: 0 });
      g.append(svg("rect", { width: W, height: H, rx: 6, class: "vertex-box" }));
      g.append(svg("text", { x: 10, y: 19, class: "vertex-name" }, o.name + "  ×" + o.parallelism));
      g.append(svg("text", { x: 10, y: 36, class: "vertex-type" }, [o.kind, o.type, o.topic].filter(Boolean).join(" · ")));
      for (const [cls, y] of [["vertex-rates", 55], ["vertex-busy", 73], ["vertex-wm", 91], ["vertex-state", 108]]) {
        g.append(svg("text", { x: 10, y, class: cls }));
      }
      g.append(svg("title"));
      const pick = () => { selected = selected === id ? "" : id; render(); };
      g.addEventListener("click", pick);
      g.addEventListener("keydown", (ev) => { if (ev.key === "Enter" || ev.key === " ") pick(); });
      vertexEls.set(id, g);
      root.append(g);
    });
    $("graph").replaceChildren(root);
  }

  // fillVertex puts o's figures into its group g.
  function fillVertex(g, o, id) {
    g.classList.toggle("selected", selected === id);
    g.dataset.in = o.records_in_per_s || 0;
    g.dataset.out = o.records_out_per_s || 0;
    g.dataset.busy = o.busy_ms_per_s || 0;
    g.dataset.backpressured = o.backpressured_ms_per_s || 0;
    g.querySelector("rect").setAttribute("fill", fill(o));
    const set = (cls, text) => { g.querySelector("." + cls).textContent = text; };
    set("vertex-rates", "in " + rate(o.records_in_per_s) + "   out " + rate(o.records_out_per_s));
    set("vertex-busy", "busy " + pct(o.busy_ms_per_s) + "   backpressured " + pct(o.backpressured_ms_per_s));
    set("vertex-wm", watermark(o.watermark_ms));
    set("vertex-state", o.state_bytes !== undefined && o.state_bytes !== null ? "state " + bytes(o.state_bytes) : "");
    g.querySelector("title").textContent = o.name + ": busy " + Math.round(o.busy_ms_per_s || 0) + " ms/s, backpressured " +
      Math.round(o.backpressured_ms_per_s || 0) + " ms/s";
  }

  function drawSubtasks(o) {
    const box = $("subtasks");
    if (!o) { box.replaceChildren(); return; }
    const t = el("table", { id: "subtask-table" },
      el("caption", {}, "Subtasks of " + o.name),
      el("thead", {}, el("tr", {}, ...["subtask", "busy ms/s", "backpressured ms/s", "idle ms/s", "in", "out", "watermark"].map((h) => el("th", {}, h)))));
    const body = el("tbody");
    for (const s of o.subtasks || []) {
      body.append(el("tr", {},
        el("td", {}, s.index), el("td", {}, Math.round(s.busy_ms_per_s || 0)), el("td", {}, Math.round(s.backpressured_ms_per_s || 0)),
        el("td", {}, Math.round(s.idle_ms_per_s || 0)), el("td", {}, rate(s.records_in_per_s)), el("td", {}, rate(s.records_out_per_s)),
        el("td", {}, watermark(s.watermark_ms))));
    }
    t.append(body);
    box.replaceChildren(t);
  }

  // ---- tables ----

  function rows(tableId, list, cells) {
    const body = $(tableId).querySelector("tbody");
    body.replaceChildren(...list.map((x) => {
      const tr = el("tr");
      for (const c of cells(x, tr)) tr.append(c instanceof Node ? c : el("td", {}, c));
      return tr;
    }));
  }

  let allCheckpoints = false; // list every checkpoint, not only the newest
  const NEWEST = 10;

  function drawCheckpoints(list, job) {
    $("checkpoints-section").hidden = false;
    const restored = job && job.restored_from;
    $("restored").textContent = restored ? "Restored from " + restored : "Started without a checkpoint (fresh start).";
    let newest = list.slice().reverse();
    const more = $("checkpoints-more");
    more.hidden = newest.length <= NEWEST;
    more.textContent = allCheckpoints ? "show the newest " + NEWEST : "show all " + newest.length;
    if (!allCheckpoints) {
      // The newest ones, and the restored-from one wherever it is.
      newest = newest.filter((c, i) => i < NEWEST || c.restored);
    }
    rows("checkpoints", newest, (c, tr) => {
      tr.dataset.id = c.id;
      tr.className = "state-" + c.state + (c.restored ? " restored" : "");
      return [
        c.id + (c.restored ? " (restored)" : ""), c.savepoint ? "savepoint" : "checkpoint", c.state.replace("_", " ") + (c.discarded ? " (discarded)" : ""), time(c.time),
        ms(c.duration_ms), bytes(c.bytes), ms(c.alignment_ms), c.failure || c.dir,
      ];
    });
  }

  function drawRestarts(list) {
    $("restarts-section").hidden = false;
    if (!list.length) {
      $("restarts").querySelector("tbody").replaceChildren(el("tr", {}, el("td", { colspan: 2, class: "muted" }, "no restarts")));
      return;
    }
    rows("restarts", list.slice().reverse(), (r) => [time(r.time), r.cause]);
  }

  function drawRules(resp) {
    const agg = new Map();
    for (const st of (resp && resp.subtasks) || []) {
      const op = st.operator.replace(/\.route$/, "");
      for (const r of st.rules || []) {
        const k = op + "\u0000" + r.id;
        const a = agg.get(k) || { op, id: r.id, state: r.state, version: r.version, matched: 0, alerts: 0, entries: 0, errors: 0 };
        a.matched += r.records_matched || 0; a.alerts += r.alerts || 0; a.entries += r.state_entries || 0; a.errors += r.errors || 0;
        agg.set(k, a);
      }
    }
    $("rules-section").hidden = agg.size === 0;
    rows("rules", [...agg.values()], (a) => [a.op, a.id, a.state, a.version, a.matched, a.alerts, a.entries, a.errors]);
  }

  function drawCluster(c) {
    $("cluster-section").hidden = false;
    $("cluster-summary").textContent = "member " + c.member + " of group " + c.group + (c.joined ? " (joined)" : " (not joined)") +
      (c.members_error ? "; members unknown: " + c.members_error : "");
    rows("units", c.units || [], (u) => [u.stage, u.unit, u.running ? "yes" : "no", u.last_checkpoint_id || "–"]);
    rows("members", c.members || [], (m) => [m.member, m.host, (m.units || []).map((u) => u.stage + "/" + u.unit).join(", ") || "–"]);
  }

  // ---- refresh ----

  function showError(msg) {
    const e = $("error");
    e.hidden = !msg;
    e.textContent = msg || "";
  }

  function render() { if (lastJob && lastJob.operators) drawGraph(lastJob); }

  async function refresh() {
    let job;
    try {
      job = await call("GET", "job");
    } catch (err) {
      showError(err.status === 401 ? "The API needs a bearer token: enter it above." : "Job: " + err.message);
      $("job-state").textContent = err.status === 503 ? err.message : "unavailable";
      $("job-state").className = "badge warn";
      return;
    }
    showError("");
    lastJob = job;
    $("updated").textContent = "updated " + new Date().toLocaleTimeString();
    $("job-name").textContent = job.name || "";
    const cluster = job.member !== undefined;
    $("job-state").textContent = cluster ? (job.joined ? "member joined" : "member not joined") : (job.ready ? "running" : "starting");
    $("job-state").className = "badge " + ((cluster ? job.joined : job.ready) ? "ok" : "warn");
    if (cluster) {
      drawCluster(job);
      for (const id of ["graph-section", "controls", "checkpoints-section", "restarts-section", "rules-section"]) $(id).hidden = true;
      return;
    }
    $("graph-section").hidden = false;
    $("cluster-section").hidden = true;
    $("controls").hidden = !token;
    drawGraph(job);
    drawRestarts(job.restarts || []);
    const [cps, rules] = await Promise.allSettled([call("GET", "checkpoints"), call("GET", "rules")]);
    if (cps.status === "fulfilled") drawCheckpoints(cps.value || [], job);
    if (rules.status === "fulfilled") drawRules(rules.value);
  }

  let timer = null;
  async function loop() {
    try { await refresh(); } catch (err) { showError(String(err && err.message || err)); }
    timer = setTimeout(loop, refreshMs);
  }
  function refreshNow() { clearTimeout(timer); loop(); }

  // ---- controls (only with a token) ----

  async function savepoint(stop) {
    if (stop && !confirm("Stop the job after a savepoint?")) return;
    const out = $("control-result");
    $("savepoint").disabled = $("stop").disabled = true;
    out.className = "";
    out.textContent = stop ? "stopping with a savepoint…" : "taking a savepoint…";
    try {
      const r = await call("POST", "savepoints", stop ? { stop: true } : {});
      out.textContent = (stop ? "stopped; savepoint " : "savepoint ") + r.path;
      out.className = "ok";
    } catch (err) {
      out.textContent = "savepoint failed: " + err.message;
      out.className = "error-text";
    } finally {
      $("savepoint").disabled = $("stop").disabled = false;
      refreshNow();
    }
  }

  function setToken(t) {
    token = t;
    if (t) sessionStorage.setItem(TOKEN_KEY, t); else sessionStorage.removeItem(TOKEN_KEY);
    $("token").value = "";
    $("token").placeholder = t ? "token set" : "API token (for savepoints)";
    $("token-clear").hidden = !t;
    refreshNow();
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("token-form").addEventListener("submit", (ev) => { ev.preventDefault(); setToken($("token").value.trim()); });
    $("token-clear").addEventListener("click", () => setToken(""));
    $("savepoint").addEventListener("click", () => savepoint(false));
    $("stop").addEventListener("click", () => savepoint(true));
    $("checkpoints-more").addEventListener("click", () => { allCheckpoints = !allCheckpoints; refreshNow(); });
    $("token-clear").hidden = !token;
    if (token) $("token").placeholder = "token set";
    loop();
  });
})();

// onesided analysts' dashboard (DESIGN 12; docs/dashboard.md).
//
// A static page: every number comes from the aggregator's /v1 API, called
// with the analyst's token in an Authorization header. The token lives in
// this tab's sessionStorage only and never enters a URL. Every string from
// the API reaches the DOM through textContent, never parsed as markup.
"use strict";

(function () {
  const TOKEN_KEY = "onesided.analystToken";
  const MAX_ROWS = 1000;
  const MAX_SAFE_SHOWN = 400;

  const state = {
    token: null,
    metrics: [],
    config: null,
    metric: null,
    rows: [],
    sort: { key: "estimate", descending: true },
  };

  // ---------------------------------------------------------------- helpers

  function $(id) {
    return document.getElementById(id);
  }

  // An element with text content only: the one way API strings reach the page.
  function el(tag, text, className) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (className) node.className = className;
    return node;
  }

  function clear(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
  }

  function fixed(value, digits) {
    return typeof value === "number" && isFinite(value) ? value.toFixed(digits) : "–";
  }

  function pValue(value) {
    if (typeof value !== "number" || !isFinite(value)) return "–";
    return value < 1e-3 ? value.toExponential(1) : value.toFixed(3);
  }

  function windowLabel(start) {
    if (typeof start !== "number") return "–";
    return new Date(start * 1000).toISOString().replace("T", " ").slice(0, 16) + " UTC";
  }

  function levelLabel(level) {
    return level === null || level === undefined ? "∞ (exact)" : String(level);
  }

  function encodingLabel(encoding) {
    if (encoding.kind === "direct") return "direct, " + encoding.domain.length + " items";
    if (encoding.kind === "bloom") {
      return "Bloom " + encoding.num_bits + " bits, " + encoding.num_hashes + " hashes, " +
        encoding.num_cohorts + " cohorts";
    }
    return String(encoding.kind);
  }

  // ---------------------------------------------------------------- messages

  class ApiError extends Error {
    constructor(status, body) {
      super(body && body.detail ? body.detail : "HTTP " + status);
      this.status = status;
      this.body = body || {};
    }
  }

  function showError(err) {
    const box = $("message");
    clear(box);
    box.className = "message error";
    if (err instanceof ApiError) {
      const head = el("strong", "HTTP " + err.status + " " + (err.body.error || "error"));
      box.appendChild(head);
      if (err.body.field) {
        box.appendChild(document.createTextNode(" · field "));
        box.appendChild(el("code", err.body.field, "field"));
      }
      box.appendChild(document.createTextNode(": "));
      box.appendChild(el("span", err.body.detail || "(no detail)", "detail"));
    } else {
      box.appendChild(el("strong", "error"));
      box.appendChild(document.createTextNode(": "));
      box.appendChild(el("span", err && err.message ? err.message : String(err), "detail"));
    }
    const dismiss = el("button", "✕", "close");
    dismiss.type = "button";
    dismiss.title = "dismiss";
    dismiss.addEventListener("click", clearMessage);
    box.appendChild(dismiss);
    box.hidden = false;
  }

  function clearMessage() {
    const box = $("message");
    clear(box);
    box.hidden = true;
  }

  // ---------------------------------------------------------------- the API

  // path: a fixed API path; query: plain values, encoded here. No token ever
  // goes into the URL: it travels in the Authorization header only.
  async function api(method, path, options) {
    const opts = options || {};
    let url = path;
    if (opts.query) {
      const parts = Object.keys(opts.query)
        .filter((k) => opts.query[k] !== null && opts.query[k] !== undefined && opts.query[k] !== "")
        .map((k) => encodeURIComponent(k) + "=" + encodeURIComponent(String(opts.query[k])));
      if (parts.length) url += "?" + parts.join("&");
    }
    const headers = { Accept: "application/json" };
    if (opts.auth !== false) headers.Authorization = "Bearer " + state.token;
    const init = { method: method, headers: headers, cache: "no-store", credentials: "omit", redirect: "error" };
    if (opts.body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(opts.body);
    }
    const response = await fetch(url, init);
    let body = null;
    try {
      body = await response.json();
    } catch (ignored) {
      body = null;
    }
    if (!response.ok) {
      if (response.status === 401) forgetToken(false);
      throw new ApiError(response.status, body);
    }
    return body;
  }

  function metricPath(name, tail) {
    return "/v1/metrics/" + encodeURIComponent(name) + (tail || "");
  }

  // ---------------------------------------------------------------- token

  function setToken(token) {
    state.token = token;
    sessionStorage.setItem(TOKEN_KEY, token);
    $("token").value = "";
    $("token-forget").hidden = false;
    $("token-state").textContent = "token set for this tab (session storage only)";
  }

  function forgetToken(resetPage) {
    state.token = null;
    sessionStorage.removeItem(TOKEN_KEY);
    $("token-forget").hidden = true;
    $("token-state").textContent = "no token: the page shows nothing until you give one";
    if (resetPage) {
      $("metrics-section").hidden = true;
      $("metric-section").hidden = true;
      clearMessage();
    }
  }

  // ---------------------------------------------------------------- metrics

  async function loadMetrics() {
    const [listing, config] = await Promise.all([
      api("GET", "/v1/metrics"),
      api("GET", "/v1/config", { auth: false }).catch(() => null),
    ]);
    state.metrics = listing.metrics;
    state.config = config && config.payload ? config.payload : null;
    renderMetrics();
  }

  function configEntry(name) {
    if (!state.config) return null;
    return state.config.metrics.find((m) => m.params.name === name) || null;
  }

  function renderMetrics() {
    const body = $("metrics-table").tBodies[0];
    clear(body);
    for (const metric of state.metrics) {
      const p = metric.params;
      const entry = configEntry(metric.name);
      const tr = document.createElement("tr");
      if (state.metric && state.metric.name === metric.name) tr.className = "chosen";
      const nameCell = document.createElement("td");
      const pick = el("button", metric.name, "link");
      pick.type = "button";
      pick.dataset.metric = metric.name;
      pick.addEventListener("click", () => run(() => chooseMetric(metric.name)));
      nameCell.appendChild(pick);
      tr.appendChild(nameCell);
      tr.appendChild(el("td", p.mode));
      tr.appendChild(el("td", encodingLabel(p.encoding)));
      tr.appendChild(el("td", levelLabel(p.level)));
      tr.appendChild(el("td", entry ? levelLabel(entry.current_level) +
        (entry.current_round ? " (round " + entry.current_round + ")" : "") : "–"));
      tr.appendChild(el("td", p.time_precision + " s"));
      tr.appendChild(el("td", p.min_batch_size));
      tr.appendChild(el("td", metric.reports, "num"));
      body.appendChild(tr);
    }
    if (!state.metrics.length) {
      const tr = document.createElement("tr");
      const td = el("td", "no metric registered", "muted");
      td.colSpan = 8;
      tr.appendChild(td);
      body.appendChild(tr);
    }
    $("metrics-section").hidden = false;
  }

  // ---------------------------------------------------------------- one metric

  async function chooseMetric(name) {
    const metric = await api("GET", metricPath(name));
    state.metric = metric;
    state.rows = [];
    renderMetrics();
    $("metric-name").textContent = metric.name;
    const p = metric.params;
    $("metric-summary").textContent = p.mode + " · " + encodingLabel(p.encoding) + " · base level " +
      levelLabel(p.level) + " · " + metric.reports + " reports · windows of " + p.time_precision +
      " s · min batch " + p.min_batch_size;
    renderCollections(metric.collections);
    fillSelectors(metric.collections);
    $("candidates-box").hidden = p.encoding.kind === "direct";
    resetResults();
    $("metric-section").hidden = false;
    await loadRounds(metric);
  }

  function roundIds(metric) {
    const ids = new Set();
    for (const c of metric.collections) if (c.round) ids.add(c.round);
    const entry = configEntry(metric.name);
    if (entry && entry.current_round) ids.add(entry.current_round);
    if (state.config) {
      for (const doc of state.config.rounds) {
        if (doc.payload && doc.payload.metric === metric.name) ids.add(doc.payload.round_id);
      }
    }
    return Array.from(ids).sort((a, b) => b - a);
  }

  function renderCollections(collections) {
    const table = $("collections-table");
    const head = table.tHead;
    const body = table.tBodies[0];
    clear(head);
    clear(body);
    const windows = Array.from(new Set(collections.map((c) => c.window))).sort((a, b) => b - a);
    const rounds = Array.from(new Set(collections.map((c) => c.round))).sort((a, b) => a - b);
    $("collections-empty").hidden = collections.length > 0;
    table.hidden = collections.length === 0;
    const hr = document.createElement("tr");
    hr.appendChild(el("th", "window"));
    for (const r of rounds) hr.appendChild(el("th", r === 0 ? "round 0 (base)" : "round " + r, "num"));
    head.appendChild(hr);
    const count = new Map(collections.map((c) => [c.window + ":" + c.round, c.reports]));
    for (const w of windows) {
      const tr = document.createElement("tr");
      const th = el("th", windowLabel(w));
      th.title = "window start " + w;
      tr.appendChild(th);
      for (const r of rounds) {
        const td = el("td", null, "num");
        const reports = count.get(w + ":" + r);
        if (reports === undefined) {
          td.textContent = "·";
        } else {
          const pick = el("button", reports, "link");
          pick.type = "button";
          pick.dataset.window = String(w);
          pick.dataset.round = String(r);
          pick.title = "decode window " + w + ", round " + r;
          pick.addEventListener("click", () => {
            $("est-window").value = String(w);
            $("est-round").value = String(r);
            run(loadEstimates);
          });
          td.appendChild(pick);
        }
        tr.appendChild(td);
      }
      body.appendChild(tr);
    }
  }

  function option(value, label) {
    const node = el("option", label);
    node.value = value;
    return node;
  }

  function fillSelectors(collections) {
    const win = $("est-window");
    const rnd = $("est-round");
    clear(win);
    clear(rnd);
    win.appendChild(option("", "default (latest decodable)"));
    for (const w of Array.from(new Set(collections.map((c) => c.window))).sort((a, b) => b - a)) {
      win.appendChild(option(String(w), windowLabel(w)));
    }
    rnd.appendChild(option("", "default (latest finished)"));
    rnd.appendChild(option("0", "0 (base)"));
    for (const r of roundIds(state.metric)) rnd.appendChild(option(String(r), "round " + r));
  }

  // ---------------------------------------------------------------- rounds

  async function loadRounds(metric) {
    const box = $("rounds");
    clear(box);
    const ids = roundIds(metric);
    $("rounds-empty").hidden = ids.length > 0;
    const rounds = await Promise.all(ids.map((id) => api("GET", "/v1/rounds/" + encodeURIComponent(id))));
    for (const r of rounds) box.appendChild(roundCard(r));
  }

  function roundCard(r) {
    const card = el("article", null, "round");
    card.dataset.round = String(r.id);
    const title = el("h4", "round " + r.id + " · level " + levelLabel(r.level_from) + " → " + levelLabel(r.level_to));
    card.appendChild(title);
    const status = r.open
      ? "open until " + windowLabel(r.expires_at)
      : "closed" + (r.closed_at ? " " + windowLabel(r.closed_at) : " (expired)");
    card.appendChild(el("p", status + " · " + r.reports + " reports" +
      (r.cohorts ? " · cohorts " + r.cohorts.join(", ") : " · all cohorts"), r.open ? "open" : "closed"));
    const list = el("ul", null, "bars");
    for (const row of r.participation) list.appendChild(participationBar(row));
    card.appendChild(list);
    if (r.decoding) card.appendChild(decodingLine(r.decoding));
    return card;
  }

  function participationBar(row) {
    const li = el("li");
    li.appendChild(el("span", "cohort " + row.cohort, "label"));
    const track = el("span", null, "track");
    const fill = el("span", null, "fill");
    const share = row.participation === null ? 0 : Math.min(1, row.participation);
    fill.style.width = (100 * share).toFixed(1) + "%";  // CSSOM, allowed by the style-src policy
    track.appendChild(fill);
    li.appendChild(track);
    const pct = row.participation === null ? "no base reports" : (100 * row.participation).toFixed(0) + "%";
    li.appendChild(el("span", row.reports + " / " + row.base_reports + " (" + pct + ")", "value"));
    return li;
  }

  function decodingLine(d) {
    const p = el("p", null, "muted");
    let text = "decoded: " + d.reports + " reports in " + d.windows.length + " window(s)";
    if (d.top && d.top.length) {
      text += " · top: " + d.top.slice(0, 3).map((t) => t.candidate + " " + fixed(t.estimate, 1)).join(", ");
    }
    if (typeof d.mean_bit_std_error === "number") text += " · mean bit std error " + fixed(d.mean_bit_std_error, 2);
    p.textContent = text;
    return p;
  }

  // ---------------------------------------------------------------- estimates

  function collectionFields() {
    const fields = {};
    const w = $("est-window").value;
    const r = $("est-round").value;
    if (w !== "") fields.window = Number(w);
    if (r !== "") fields.round = Number(r);
    if (state.metric.params.encoding.kind !== "direct") {
      const lines = $("candidates").value.split("\n").map((s) => s.trim()).filter((s) => s.length);
      fields.candidates = lines.length ? lines : null;
    }
    return fields;
  }

  function header(body) {
    return "window " + windowLabel(body.window) + " · round " + body.round + " · level " +
      levelLabel(body.level) + " · " + body.reports + " reports";
  }

  async function loadEstimates() {
    state.rows = [];  // no stale numbers next to an error
    $("estimates-summary").textContent = "";
    renderEstimates();
    const fields = collectionFields();
    fields.alpha = $("est-alpha").value.trim();  // sent as typed: the API validates and names the field
    const body = await api("POST", metricPath(state.metric.name, "/estimates"), { body: fields });
    const summary = $("estimates-summary");
    if (body.reason) {
      summary.textContent = header(body) + " · " + body.reason;
      state.rows = [];
    } else {
      summary.textContent = header(body) + " · " + body.candidates + " candidates · " + body.detected +
        " detected (" + body.correction + ", alpha " + body.alpha + ") · fit " + body.method;
      state.rows = body.rows;
    }
    renderEstimates();
  }

  function sortedRows() {
    const key = state.sort.key;
    const sign = state.sort.descending ? -1 : 1;
    let rows = state.rows.slice();
    if ($("detected-only").checked) rows = rows.filter((row) => row.detected);
    rows.sort((a, b) => {
      if (key === "candidate") return sign * a.candidate.localeCompare(b.candidate);
      return sign * (a.estimate - b.estimate);
    });
    return rows;
  }

  function renderEstimates() {
    const table = $("estimates-table");
    const body = table.tBodies[0];
    clear(body);
    const rows = sortedRows();
    for (const row of rows.slice(0, MAX_ROWS)) {
      const tr = document.createElement("tr");
      if (row.detected) tr.className = "detected";
      tr.appendChild(el("td", row.candidate, "candidate"));
      tr.appendChild(el("td", fixed(row.estimate, 1), "num estimate"));
      tr.appendChild(el("td", fixed(row.std_error, 1), "num"));
      tr.appendChild(el("td", "[" + fixed(row.lower, 1) + ", " + fixed(row.upper, 1) + "]", "num"));
      tr.appendChild(el("td", pValue(row.p_value), "num"));
      tr.appendChild(el("td", row.detected ? "✔ detected" : "–", row.detected ? "flag" : "muted"));
      body.appendChild(tr);
    }
    table.hidden = state.rows.length === 0;
    const more = $("estimates-more");
    more.hidden = rows.length <= MAX_ROWS;
    more.textContent = "showing " + MAX_ROWS + " of " + rows.length + " rows in this order";
    for (const th of table.tHead.rows[0].cells) th.removeAttribute("aria-sort");
    const active = table.tHead.querySelector('button[data-sort="' + state.sort.key + '"]');
    active.parentElement.setAttribute("aria-sort", state.sort.descending ? "descending" : "ascending");
  }

  function toggleSort(key) {
    if (state.sort.key === key) {
      state.sort.descending = !state.sort.descending;
    } else {
      state.sort = { key: key, descending: key === "estimate" };
    }
    renderEstimates();
  }

  // ---------------------------------------------------------------- certificates

  async function loadCertificates() {
    const summary = $("certificates-summary");
    const box = $("safe-box");
    const list = $("safe-list");
    summary.textContent = "";  // no stale certificates next to an error
    box.hidden = true;
    clear(list);
    const fields = collectionFields();
    fields.threshold = $("threshold").value.trim();  // as typed: the API validates
    fields.alpha = $("cert-alpha").value.trim();
    const body = await api("POST", metricPath(state.metric.name, "/certificates"), { body: fields });
    if (body.reason) {
      summary.textContent = header(body) + " · " + body.reason;
      return;
    }
    const safe = body.rows.filter((row) => row.safe);
    summary.textContent = "threshold " + body.threshold + ", alpha " + body.alpha + ": " + body.safe +
      " safe, " + (body.rows.length - body.safe) + " obscure of " + body.rows.length + " candidates · " +
      header(body);
    for (const row of safe.slice(0, MAX_SAFE_SHOWN)) {
      const li = el("li", row.candidate);
      li.title = "upper bound " + row.upper_bound;
      list.appendChild(li);
    }
    const more = $("safe-more");
    more.hidden = safe.length > 0 && safe.length <= MAX_SAFE_SHOWN;
    more.textContent = safe.length ? "and " + (safe.length - MAX_SAFE_SHOWN) + " more" : "none at this threshold";
    box.hidden = false;
  }

  function resetResults() {
    state.rows = [];
    $("estimates-summary").textContent = "";
    $("certificates-summary").textContent = "";
    $("safe-box").hidden = true;
    renderEstimates();
  }

  // ---------------------------------------------------------------- wiring

  // Run an action; its failure goes to the message area, success clears it.
  async function run(action) {
    try {
      await action();
      clearMessage();
    } catch (err) {
      showError(err);
    }
  }

  function start() {
    $("token-form").addEventListener("submit", (event) => {
      event.preventDefault();
      const token = $("token").value.trim();
      if (!token) return;
      setToken(token);
      run(loadMetrics);
    });
    $("token-forget").addEventListener("click", () => forgetToken(true));
    $("estimates-form").addEventListener("submit", (event) => {
      event.preventDefault();
      run(loadEstimates);
    });
    $("certificates-form").addEventListener("submit", (event) => {
      event.preventDefault();
      run(loadCertificates);
    });
    $("detected-only").addEventListener("change", renderEstimates);
    for (const button of document.querySelectorAll("button.sort")) {
      button.addEventListener("click", () => toggleSort(button.dataset.sort));
    }
    const saved = sessionStorage.getItem(TOKEN_KEY);
    if (saved) {
      setToken(saved);
      run(loadMetrics);
    }
  }

  document.addEventListener("DOMContentLoaded", start);
})();

// onesided analysts' dashboard (docs/dashboard.md).
//
// A static page: every number comes from the aggregator's /v1 API, called
// with the analyst's token in an Authorization header. The token lives in
// this tab's sessionStorage only and never enters a URL. Every string from
// the API reaches the DOM through textContent, never parsed as markup.
// Charts are plain SVG built here (no library, nothing fetched, nothing
// inline for the Content-Security-Policy to refuse; docs/dashboard.md 4).
"use strict";

(function () {
  const TOKEN_KEY = "onesided.analystToken";
  const SVG_NS = "http://www.w3.org/2000/svg";  // a namespace name, never fetched
  const MAX_ROWS = 1000;
  const MAX_SAFE_SHOWN = 400;
  const MAX_RELEASE_ROWS = 200;
  const LABEL_CHARS = 28;

  const state = {
    token: null,
    metrics: [],
    config: null,
    metric: null,
    rows: [],
    estimates: null,
    certificates: null,
    view: "estimates",
    sort: { key: "estimate", descending: true },
    seq: {},  // per kind of request: the latest one's number; older answers are dropped
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

  // An SVG element; attributes are numbers or fixed words, text only via textContent.
  function svg(tag, attrs, text) {
    const node = document.createElementNS(SVG_NS, tag);
    for (const key of Object.keys(attrs || {})) node.setAttribute(key, String(attrs[key]));
    if (text !== undefined && text !== null) node.textContent = String(text);
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

  // A label cut to fit `room` pixels (8 px a character: wide enough for 12 px capitals and signs; a
  // narrow screen's labels get fewer characters) and to LABEL_CHARS at most, "…" marking the cut.
  function shortLabel(text, room) {
    const s = String(text);
    const most = Math.max(4, Math.min(LABEL_CHARS, Math.floor(room / 8)));
    return s.length > most ? s.slice(0, most - 1) + "…" : s;
  }

  function median(values) {
    const v = values.filter((x) => typeof x === "number" && isFinite(x)).sort((a, b) => a - b);
    if (!v.length) return null;
    const mid = v.length >> 1;
    return v.length % 2 ? v[mid] : (v[mid - 1] + v[mid]) / 2;
  }

  function encodingLabel(encoding) {
    if (encoding.kind === "direct") return "direct, " + encoding.domain.length + " items";
    if (encoding.kind === "bloom") {
      return "Bloom " + encoding.num_bits + " bits, " + encoding.num_hashes + " hashes, " +
        encoding.num_cohorts + " cohorts";
    }
    return String(encoding.kind);
  }

  // Round numbers for an axis from lo to hi: about `count` of them, 1, 2 or 5 times a power of ten.
  function niceTicks(lo, hi, count) {
    const span = hi - lo || 1;
    const raw = span / count;
    const power = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 5, 10].map((m) => m * power).find((s) => s >= raw);
    const ticks = [];
    for (let t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) ticks.push(Math.round(t / step) * step);
    return ticks;
  }

  function linear(d0, d1, r0, r1) {
    const k = d1 === d0 ? 0 : (r1 - r0) / (d1 - d0);
    return (v) => r0 + (v - d0) * k;
  }

  // Inverse of the standard normal's upper tail: z with 1 - Phi(z) = q (Acklam; relative error < 1.2e-9).
  function upperNormalQuantile(q) {
    const a = [-39.69683028665376, 220.9460984245205, -275.9285104469687, 138.3577518672690,
      -30.66479806614716, 2.506628277459239];
    const b = [-54.47609879822406, 161.5858368580409, -155.6989798598866, 66.80131188771972, -13.28068155288572];
    const c = [-0.007784894002430293, -0.3223964580411365, -2.400758277161838, -2.549732539343734,
      4.374664141464968, 2.938163982698783];
    const d = [0.007784695709041462, 0.3224671290700398, 2.445134137142996, 3.754408661907416];
    const tail = (p) => {
      const t = Math.sqrt(-2 * Math.log(p));
      return (((((c[0] * t + c[1]) * t + c[2]) * t + c[3]) * t + c[4]) * t + c[5]) /
        ((((d[0] * t + d[1]) * t + d[2]) * t + d[3]) * t + 1);
    };
    if (q < 0.02425) return -tail(q);
    if (q > 1 - 0.02425) return tail(1 - q);
    const p = 0.5 - q;  // z = -Phi^-1(q), by the symmetry of the central rational approximation
    const r = p * p;
    return (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * p /
      (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
  }

  // ---------------------------------------------------------------- candidate labels

  // "group/name@x,y": the group is what precedes the first "/", the coordinates
  // the two numbers after the last "@"; both optional (docs/dashboard.md 1.6).
  function candidateLabels(name) {
    let rest = String(name);
    let x = null;
    let y = null;
    const at = rest.lastIndexOf("@");
    if (at > 0) {
      const m = /^(-?\d+(?:\.\d+)?),(-?\d+(?:\.\d+)?)$/.exec(rest.slice(at + 1));
      if (m) {
        x = Number(m[1]);
        y = Number(m[2]);
        rest = rest.slice(0, at);
      }
    }
    const slash = rest.indexOf("/");
    const group = slash > 0 ? rest.slice(0, slash) : null;
    return { group: group, x: x, y: y };
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
      box.appendChild(el("strong", "HTTP " + err.status + " " + (err.body.error || "error")));
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
    dismiss.setAttribute("aria-label", "dismiss the message");
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
  async function request(method, path, options) {
    const opts = options || {};
    let url = path;
    if (opts.query) {
      const parts = Object.keys(opts.query)
        .filter((k) => opts.query[k] !== null && opts.query[k] !== undefined && opts.query[k] !== "")
        .map((k) => encodeURIComponent(k) + "=" + encodeURIComponent(String(opts.query[k])));
      if (parts.length) url += "?" + parts.join("&");
    }
    const headers = { Accept: opts.accept || "application/json" };
    if (opts.auth !== false) headers.Authorization = "Bearer " + state.token;
    const init = { method: method, headers: headers, cache: "no-store", credentials: "omit", redirect: "error" };
    if (opts.body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(opts.body);
    }
    const response = await fetch(url, init);
    if (!response.ok) {
      let body = null;
      try {
        body = await response.json();
      } catch (ignored) {
        body = null;
      }
      if (response.status === 401) forgetToken(false);
      throw new ApiError(response.status, body);
    }
    return response;
  }

  // A number field as JSON wants it: a number when the text is one, left out when empty (the API's
  // default, or its "required" error), else the text itself so the API refuses it naming the field.
  function typedNumber(text) {
    const t = String(text).trim();
    if (t === "") return undefined;
    const n = Number(t);
    return Number.isFinite(n) && /^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/.test(t) ? n : t;
  }

  async function api(method, path, options) {
    const response = await request(method, path, options);
    try {
      return await response.json();
    } catch (ignored) {
      return null;
    }
  }

  function metricPath(name, tail) {
    return "/v1/metrics/" + encodeURIComponent(name) + (tail || "");
  }

  // A number for a new request of `kind`; isLatest(kind, n) is false once a newer one started.
  function begin(kind) {
    state.seq[kind] = (state.seq[kind] || 0) + 1;
    return state.seq[kind];
  }

  function isLatest(kind, n) {
    return state.seq[kind] === n;
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

  function isTrusted(metric) {
    return metric.params.mode === "trusted";
  }

  async function chooseMetric(name) {
    const metric = await api("GET", metricPath(name));
    state.metric = metric;
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
    const trusted = isTrusted(metric);
    for (const view of ["estimates", "rounds"]) $("tab-" + view).hidden = trusted;
    $("tab-certificates").hidden = p.mode !== "asymmetric";  // one-sided certificates need one-sided noise
    $("tab-releases").hidden = !trusted;
    $("collection-form").hidden = trusted;  // releases choose their own window
    $("metric-section").hidden = false;
    selectView(trusted ? "releases" : "estimates", false);
    if (trusted) {
      await loadReleases(metric);
      return;
    }
    await loadRounds(metric);
    // a direct metric shows its estimates at once; a Bloom one waits for its candidates
    if (p.encoding.kind === "direct" && metric.reports > 0) await loadEstimates();
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
        } else if (isTrusted(state.metric)) {
          td.textContent = String(reports);  // exact counts reach analysts as releases only
        } else {
          const pick = el("button", reports, "link");
          pick.type = "button";
          pick.dataset.window = String(w);
          pick.dataset.round = String(r);
          pick.title = "decode window " + w + ", round " + r;
          pick.addEventListener("click", () => {
            $("est-window").value = String(w);
            $("est-round").value = String(r);
            selectView("estimates", false);
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
    const cmp = $("compare-round");
    clear(win);
    clear(rnd);
    clear(cmp);
    win.appendChild(option("", "default (latest decodable)"));
    for (const w of Array.from(new Set(collections.map((c) => c.window))).sort((a, b) => b - a)) {
      win.appendChild(option(String(w), windowLabel(w)));
    }
    rnd.appendChild(option("", "default (latest finished)"));
    rnd.appendChild(option("0", "0 (base)"));
    for (const r of roundIds(state.metric)) {
      rnd.appendChild(option(String(r), "round " + r));
      cmp.appendChild(option(String(r), "round " + r));
    }
  }

  // ---------------------------------------------------------------- views (tabs)

  function visibleTabs() {
    return Array.from(document.querySelectorAll("#view-tabs [role=tab]")).filter((t) => !t.hidden);
  }

  function selectView(name, focus) {
    state.view = name;
    for (const tab of document.querySelectorAll("#view-tabs [role=tab]")) {
      const chosen = tab.dataset.view === name;
      tab.setAttribute("aria-selected", chosen ? "true" : "false");
      tab.tabIndex = chosen ? 0 : -1;
      $("view-" + tab.dataset.view).hidden = !chosen;
      if (chosen && focus) tab.focus();
    }
    hideTip();
    // the rounds view compares at once when it can (a direct metric: no candidates to type)
    const direct = state.metric && state.metric.params.encoding.kind === "direct";
    if (name === "rounds" && direct && $("compare-round").value && !$("compare-chart").firstChild) run(loadComparison);
  }

  function tabKeys(event) {
    const tabs = visibleTabs();
    const at = tabs.indexOf(document.activeElement);
    if (at < 0) return;
    let next = null;
    if (event.key === "ArrowRight") next = tabs[(at + 1) % tabs.length];
    else if (event.key === "ArrowLeft") next = tabs[(at - 1 + tabs.length) % tabs.length];
    else if (event.key === "Home") next = tabs[0];
    else if (event.key === "End") next = tabs[tabs.length - 1];
    if (!next) return;
    event.preventDefault();
    selectView(next.dataset.view, true);
  }

  // ---------------------------------------------------------------- charts: focus and tooltip

  // Makes `chart` (an <svg>) one tab stop whose arrow keys walk `items`
  // ({node, text}); hovering an item or reaching it by keyboard shows its
  // text in the tooltip, which is also a polite live region.
  function interactive(chart, items, label) {
    chart.setAttribute("tabindex", "0");
    chart.setAttribute("role", "group");
    chart.setAttribute("aria-label", label + " · " + items.length + " items; arrow keys read them one by one");
    let at = -1;
    const show = (i, fromKey) => {
      if (at >= 0 && items[at]) items[at].node.classList.remove("active");
      at = i;
      items[i].node.classList.add("active");
      chart.dataset.active = String(i);
      showTip(items[i].node, items[i].text);
      if (fromKey && items[i].node.scrollIntoView) items[i].node.scrollIntoView({ block: "nearest" });
    };
    items.forEach((item, i) => {
      item.node.classList.add("item");
      const box = item.node.getBBox();  // one target for the whole item, gaps included
      item.node.insertBefore(svg("rect", { class: "hit", x: box.x, y: box.y, width: box.width, height: box.height }),
        item.node.firstChild);
      item.node.appendChild(svg("title", {}, item.text));
      item.node.addEventListener("mouseenter", () => show(i, false));
      item.node.addEventListener("mouseleave", () => hideTip());
    });
    chart.addEventListener("focus", () => {
      if (items.length) show(at < 0 ? 0 : at, true);
    });
    chart.addEventListener("blur", () => hideTip());
    chart.addEventListener("keydown", (event) => {
      if (!items.length) return;
      let next = null;
      if (event.key === "ArrowDown" || event.key === "ArrowRight") next = Math.min(items.length - 1, at + 1);
      else if (event.key === "ArrowUp" || event.key === "ArrowLeft") next = Math.max(0, at - 1);
      else if (event.key === "Home") next = 0;
      else if (event.key === "End") next = items.length - 1;
      else if (event.key === "Escape") {
        hideTip();
        return;
      }
      if (next === null) return;
      event.preventDefault();
      show(next, true);
    });
  }

  function showTip(node, text) {
    const tip = $("chart-tip");
    tip.textContent = text;
    tip.hidden = false;
    const box = node.getBoundingClientRect();
    const width = tip.offsetWidth;
    const left = Math.max(8, Math.min(window.innerWidth - width - 8, box.left + box.width / 2 - width / 2));
    tip.style.left = (left + window.scrollX).toFixed(0) + "px";  // CSSOM, allowed by the style-src policy
    tip.style.top = (box.bottom + window.scrollY + 6).toFixed(0) + "px";
  }

  function hideTip() {
    const tip = $("chart-tip");
    if (tip) tip.hidden = true;
  }

  // A chart of `rows` rows of layout.rowH pixels under a head of layout.head,
  // labels in the layout.left pixels, values in the layout.right ones.
  function rowFrame(container, cls, rows, layout) {
    const width = Math.min(layout.max || 1100, chartWidth(container));
    const height = layout.head + rows * layout.rowH + 6;
    const root = svg("svg", { class: cls, width: width, height: height, viewBox: "0 0 " + width + " " + height,
      "data-rows": rows });
    // on a narrow screen the labels get at most 40% of the width, the values at most 18%
    return { root: root, width: width, height: height, left: Math.min(layout.left, Math.round(0.4 * width)),
      right: Math.min(layout.right, Math.round(0.18 * width)), rowH: layout.rowH, head: layout.head };
  }

  // The container's width (a phone's 240 px and up), so that a chart never widens the page. A chart drawn
  // in a tab not shown yet has no width of its own: its nearest shown ancestor's, less that one's padding
  // and 40 px for the boxes between them, stands in.
  function chartWidth(container) {
    let width = container.clientWidth;
    for (let node = container.parentElement; !width && node; node = node.parentElement) {
      if (node.clientWidth) {
        const style = getComputedStyle(node);
        width = node.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight) - 40;
      }
    }
    return Math.max(240, Math.min(1100, width || 900));
  }

  // An x axis on top: grid lines down to `bottom` and tick labels.
  function xAxis(root, x, ticks, top, bottom) {
    const axis = svg("g", { class: "axis" });
    for (const t of ticks) {
      axis.appendChild(svg("line", { class: "grid", x1: x(t), x2: x(t), y1: top, y2: bottom }));
      axis.appendChild(svg("text", { class: "tick", x: x(t), y: top - 6, "text-anchor": "middle" }, t));
    }
    root.appendChild(axis);
  }

  // Entries left to right from x; one that would pass the chart's right edge starts a new line at the
  // left edge (15 px lower), so a phone shows every entry. Returns the y of the last line.
  function legend(root, x, y, entries) {
    const width = Number(root.getAttribute("width"));
    let at = x;
    for (const [cls, text] of entries) {
      const size = 26 + 7 * text.length;
      if (at > 4 && at + size - 10 > width) {
        at = 4;
        y += 15;
      }
      root.appendChild(svg("rect", { class: "swatch " + cls, x: at, y: y - 9, width: 12, height: 10 }));
      const label = svg("text", { class: "legend", x: at + 16, y: y }, text);
      root.appendChild(label);
      at += size;
    }
    return y;
  }

  // ---------------------------------------------------------------- rounds

  async function loadRounds(metric) {
    const n = begin("rounds");
    const box = $("rounds");
    clear(box);
    const ids = roundIds(metric);
    const rounds = await Promise.all(ids.map((id) => api("GET", "/v1/rounds/" + encodeURIComponent(id))));
    if (!isLatest("rounds", n)) return;
    $("rounds-empty").hidden = ids.length > 0;
    $("compare-form").hidden = ids.length === 0;
    for (const r of rounds) box.appendChild(roundCard(r));
  }

  function roundCard(r) {
    const card = el("article", null, "round");
    card.dataset.round = String(r.id);
    card.appendChild(el("h4", "round " + r.id + " · level " + levelLabel(r.level_from) + " → " + levelLabel(r.level_to)));
    const status = r.open
      ? "open until " + windowLabel(r.expires_at)
      : "closed" + (r.closed_at ? " " + windowLabel(r.closed_at) : " (expired)");
    const base = r.participation.reduce((s, row) => s + row.base_reports, 0);
    const absent = Math.max(0, base - r.reports);
    card.appendChild(el("p", status + " · " + r.reports + " reports of " + base + " in the base collection · " +
      absent + " did not take part (refused or absent)" +
      (r.cohorts ? " · cohorts " + r.cohorts.join(", ") : " · all cohorts"), r.open ? "open" : "closed"));
    const chart = el("div", null, "chart");
    card.appendChild(chart);
    participationChart(chart, r);
    if (r.decoding) card.appendChild(decodingLine(r.decoding));
    return card;
  }

  // Per cohort: a track of the base collection's reports, filled by the round's share.
  function participationChart(container, r) {
    const rows = r.participation;
    const { root, width, height, left, right, rowH, head } = rowFrame(container, "participation", rows.length,
      { max: 720, left: 90, right: 24, rowH: 36, head: 26 });
    const x = linear(0, 1, left, width - right);
    xAxis(root, x, [0, 0.25, 0.5, 0.75, 1], head, height - 4);
    for (const t of root.querySelectorAll("text.tick")) t.textContent = (100 * Number(t.textContent)).toFixed(0) + "%";
    const items = [];
    rows.forEach((row, i) => {
      const y = head + i * rowH + 4;
      const g = svg("g", { class: "cohort", "data-cohort": row.cohort });
      // the whole row (label, bar and the value under it) answers the pointer, gaps included
      g.appendChild(svg("rect", { class: "hit", x: 0, y: y - 4, width: width, height: rowH, fill: "transparent" }));
      g.appendChild(svg("text", { class: "label", x: left - 8, y: y + 11, "text-anchor": "end" }, "cohort " + row.cohort));
      g.appendChild(svg("rect", { class: "track", x: x(0), y: y, width: x(1) - x(0), height: 14 }));
      const share = row.participation === null ? 0 : Math.min(1, row.participation);
      g.appendChild(svg("rect", { class: "fill", x: x(0), y: y, width: (x(share) - x(0)).toFixed(2), height: 14 }));
      const pct = row.participation === null ? "no base reports" : (100 * row.participation).toFixed(0) + "%";
      const refused = Math.max(0, row.base_reports - row.reports);
      const text = row.reports + " / " + row.base_reports + " (" + pct + ")";
      g.appendChild(svg("text", { class: "value", x: x(0), y: y + 28 }, text + " · " + refused + " not in"));
      root.appendChild(g);
      items.push({ node: g, text: "cohort " + row.cohort + ": " + text + " took part; " + refused +
        " refused or absent" });
    });
    container.appendChild(root);
    interactive(root, items, "round " + r.id + " participation per cohort");
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

  // The same candidates decoded from round 0 and from a round: the intervals side by side.
  async function loadComparison() {
    const n = begin("compare");
    const round = $("compare-round").value;
    $("compare-summary").textContent = "";
    $("compare-figure").hidden = true;
    if (round === "") return;
    const fields = collectionFields();
    delete fields.round;
    const [before, after] = await Promise.all([
      api("POST", metricPath(state.metric.name, "/estimates"), { body: Object.assign({}, fields, { round: 0 }) }),
      api("POST", metricPath(state.metric.name, "/estimates"), { body: Object.assign({}, fields, { round: Number(round) }) }),
    ]);
    if (!isLatest("compare", n)) return;
    const summary = $("compare-summary");
    if (before.reason || after.reason) {
      summary.textContent = (before.reason ? "round 0: " + before.reason + " " : "") +
        (after.reason ? "round " + round + ": " + after.reason : "");
      return;
    }
    const se0 = median(before.rows.map((r) => r.std_error));
    const se1 = median(after.rows.map((r) => r.std_error));
    summary.textContent = "round 0 (level " + levelLabel(before.level) + ", " + before.reports + " reports) → round " +
      after.round + " (level " + levelLabel(after.level) + ", " + after.reports + " reports) · median std error " +
      fixed(se0, 1) + " → " + fixed(se1, 1) + (se0 && se1 ? " (×" + (se1 / se0).toFixed(2) + ")" : "") +
      " · detected " + before.detected + " → " + after.detected;
    comparisonChart($("compare-chart"), before, after, Number($("compare-top").value));
    $("compare-caption").textContent = "The " + Math.min(Number($("compare-top").value), after.rows.length) +
      " largest estimates of round " + after.round + " (of " + after.rows.length + " candidates), each with its " +
      (100 * after.confidence).toFixed(0) + "% interval before (upper line, round 0) and after (lower line).";
    $("compare-figure").hidden = false;
  }

  function comparisonChart(container, before, after, top) {
    clear(container);
    const base = new Map(before.rows.map((r) => [r.candidate, r]));
    const rows = after.rows.slice(0, top).filter((r) => base.has(r.candidate));
    const frame = rowFrame(container, "compare", rows.length, { left: 200, right: 150, rowH: 26, head: 46 });
    const { root, width, height, left, rowH, head } = frame;
    const errors = new Map(rows.map((r) => [r.candidate,
      "±" + fixed(base.get(r.candidate).std_error, 1) + " → ±" + fixed(r.std_error, 1)]));
    // room on the right for the longest "±before → ±after" (7 px a character), whatever the width
    const right = Math.max(frame.right, 14 + 7 * Math.max(0, ...Array.from(errors.values(), (t) => t.length)));
    const all = rows.flatMap((r) => [r, base.get(r.candidate)]);
    const lo = Math.min(0, ...all.map((r) => (isFinite(r.lower) ? r.lower : r.estimate)));
    const hi = Math.max(1, ...all.map((r) => (isFinite(r.upper) ? r.upper : r.estimate)));
    const x = linear(lo, hi, left, width - right);
    legend(root, left, 14, [["before", "round 0 · level " + levelLabel(before.level)],
      ["after", "round " + after.round + " · level " + levelLabel(after.level)]]);
    xAxis(root, x, niceTicks(lo, hi, 6), head, height - 4);
    root.appendChild(svg("line", { class: "zero", x1: x(0), x2: x(0), y1: head, y2: height - 4 }));
    const items = [];
    rows.forEach((r, i) => {
      const b = base.get(r.candidate);
      const y = head + i * rowH + rowH / 2;
      const g = svg("g", { class: "pair" });
      g.dataset.candidate = r.candidate;
      g.appendChild(svg("text", { class: "label", x: left - 8, y: y + 4, "text-anchor": "end" }, shortLabel(r.candidate, left - 10)));
      g.appendChild(intervalMark(x, b, y - 5, "before"));
      g.appendChild(intervalMark(x, r, y + 5, "after"));
      g.appendChild(svg("text", { class: "value", x: width - right + 8, y: y + 4 }, errors.get(r.candidate)));
      root.appendChild(g);
      items.push({ node: g, text: r.candidate + ": round 0 " + fixed(b.estimate, 1) + " ± " + fixed(b.std_error, 1) +
        " [" + fixed(b.lower, 1) + ", " + fixed(b.upper, 1) + "] → round " + after.round + " " + fixed(r.estimate, 1) +
        " ± " + fixed(r.std_error, 1) + " [" + fixed(r.lower, 1) + ", " + fixed(r.upper, 1) + "]" });
    });
    container.appendChild(root);
    interactive(root, items, "estimates before and after round " + after.round);
  }

  function intervalMark(x, row, y, cls) {
    const g = svg("g", { class: "interval " + cls });
    if (isFinite(row.lower) && isFinite(row.upper)) {
      g.appendChild(svg("line", { class: "ci", x1: x(row.lower), x2: x(row.upper), y1: y, y2: y }));
      g.appendChild(svg("line", { class: "ci", x1: x(row.lower), x2: x(row.lower), y1: y - 3, y2: y + 3 }));
      g.appendChild(svg("line", { class: "ci", x1: x(row.upper), x2: x(row.upper), y1: y - 3, y2: y + 3 }));
    }
    g.appendChild(svg("circle", { class: "dot", cx: x(row.estimate), cy: y, r: 3.5 }));
    return g;
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
    const n = begin("estimates");
    state.rows = [];  // no stale numbers next to an error
    state.estimates = null;
    $("estimates-summary").textContent = "";
    renderEstimates();
    const fields = collectionFields();
    fields.alpha = typedNumber($("est-alpha").value);  // the API validates and names the field
    const body = await api("POST", metricPath(state.metric.name, "/estimates"), { body: fields });
    if (!isLatest("estimates", n)) return;
    const summary = $("estimates-summary");
    if (body.reason) {
      summary.textContent = header(body) + " · " + body.reason;
    } else {
      summary.textContent = header(body) + " · " + body.candidates + " candidates · " + body.detected +
        " detected (" + body.correction + ", alpha " + body.alpha + ") · fit " + body.method;
      state.rows = body.rows;
      state.estimates = body;
    }
    renderEstimates();
  }

  // "counts >= 0": max(0, x) of the estimate and its interval, for display only (biased upwards;
  // the API's JSON and CSV keep the unbiased values, which the download saves).
  function displayed(rows) {
    if (!$("est-nonneg").checked) return rows;
    const clip = (v) => (typeof v === "number" ? Math.max(0, v) : v);
    return rows.map((row) => Object.assign({}, row, { estimate: clip(row.estimate), lower: clip(row.lower),
      upper: clip(row.upper), proportion: clip(row.proportion) }));
  }

  function sortedRows() {
    const key = state.sort.key;
    const sign = state.sort.descending ? -1 : 1;
    let rows = displayed(state.rows);
    if ($("detected-only").checked) rows = rows.filter((row) => row.detected);
    rows.sort((a, b) => {
      if (key === "candidate") return sign * a.candidate.localeCompare(b.candidate);
      return sign * (a.estimate - b.estimate);
    });
    return rows;
  }

  function renderEstimates() {
    $("estimates-result").hidden = state.rows.length === 0;
    renderEstimatesTable();
    renderEstimatesChart();
  }

  function renderEstimatesTable() {
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
    const asTable = $("est-as-table").getAttribute("aria-pressed") === "true";
    const more = $("estimates-more");
    more.hidden = !asTable || rows.length <= MAX_ROWS;
    more.textContent = "showing " + MAX_ROWS + " of " + rows.length + " rows in this order";
    for (const th of table.tHead.rows[0].cells) th.removeAttribute("aria-sort");
    const active = table.tHead.querySelector('button[data-sort="' + state.sort.key + '"]');
    active.parentElement.setAttribute("aria-sort", state.sort.descending ? "descending" : "ascending");
  }

  // The estimate above which a candidate with standard error `se` is detected:
  // z * se with 1 - Phi(z) the corrected level (Bonferroni alpha / m; BH alpha k / m, k detected).
  function detectionZ(body) {
    const m = Math.max(1, body.candidates);
    const k = Math.max(1, body.detected);
    const cut = body.correction === "bh" ? body.alpha * k / m : body.alpha / m;
    return upperNormalQuantile(cut);
  }

  function renderEstimatesChart() {
    const container = $("estimates-chart");
    clear(container);
    const body = state.estimates;
    if (!body || !state.rows.length) return;
    const ranked = displayed(state.rows).sort((a, b) => b.estimate - a.estimate)
      .filter((row) => !$("detected-only").checked || row.detected);
    const rows = ranked.slice(0, Number($("est-top").value));
    const z = detectionZ(body);
    const se = median(state.rows.map((r) => r.std_error));
    const threshold = se === null ? null : z * se;
    const { root, width, height, left, right, rowH, head } = rowFrame(container, "estimates", rows.length,
      { left: 210, right: 70, rowH: 18, head: 48 });
    const lo = Math.min(0, ...rows.map((r) => (isFinite(r.lower) ? r.lower : r.estimate)));
    const hi = Math.max(1, threshold || 0, ...rows.map((r) => (isFinite(r.upper) ? r.upper : r.estimate)));
    const x = linear(lo, hi, left, width - right);
    legend(root, left, 14, [["detected", "detected"], ["undetected", "not detected"],
      ["ci-key", (100 * body.confidence).toFixed(0) + "% interval"], ["threshold-key", "detection threshold"]]);
    xAxis(root, x, niceTicks(lo, hi, 6), head, height - 4);
    root.appendChild(svg("line", { class: "zero", x1: x(0), x2: x(0), y1: head, y2: height - 4 }));
    const items = [];
    rows.forEach((row, i) => {
      const y = head + i * rowH;
      const g = svg("g", { class: "bar-row " + (row.detected ? "detected" : "undetected") });
      g.dataset.candidate = row.candidate;
      g.appendChild(svg("text", { class: "label", x: left - 8, y: y + 13, "text-anchor": "end" }, shortLabel(row.candidate, left - 10)));
      const x0 = x(Math.min(0, row.estimate));
      g.appendChild(svg("rect", { class: "bar", x: x0, y: y + 4, width: Math.max(0.5, Math.abs(x(row.estimate) - x(0))),
        height: 10 }));
      if (isFinite(row.lower) && isFinite(row.upper)) {
        g.appendChild(svg("line", { class: "ci", x1: x(row.lower), x2: x(row.upper), y1: y + 9, y2: y + 9 }));
        g.appendChild(svg("line", { class: "ci", x1: x(row.lower), x2: x(row.lower), y1: y + 5, y2: y + 13 }));
        g.appendChild(svg("line", { class: "ci", x1: x(row.upper), x2: x(row.upper), y1: y + 5, y2: y + 13 }));
      }
      g.appendChild(svg("text", { class: "value", x: width - 6, y: y + 13, "text-anchor": "end" }, fixed(row.estimate, 1)));
      root.appendChild(g);
      const own = typeof row.std_error === "number" ? " · its detection threshold " + fixed(z * row.std_error, 1) : "";
      items.push({ node: g, text: row.candidate + ": estimate " + fixed(row.estimate, 1) + " ± " + fixed(row.std_error, 1) +
        ", interval [" + fixed(row.lower, 1) + ", " + fixed(row.upper, 1) + "], p " + pValue(row.p_value) + " · " +
        (row.detected ? "detected" : "not detected") + own });
    });
    if (threshold !== null) {
      root.appendChild(svg("line", { class: "threshold", x1: x(threshold), x2: x(threshold), y1: head - 2, y2: height - 4 }));
      root.appendChild(svg("text", { class: "threshold-label", x: x(threshold) + 4, y: 30 }, "≈ " + threshold.toFixed(1)));
    }
    container.appendChild(root);
    interactive(root, items, "ranked estimates");
    $("estimates-caption").textContent = "The " + rows.length + " largest estimates of " + ranked.length +
      ($("detected-only").checked ? " detected" : "") + " candidates, largest first, each with its " +
      (100 * body.confidence).toFixed(0) + "% interval. Dashed line: the detection threshold z·se = " +
      (threshold === null ? "–" : threshold.toFixed(1)) + " (z = " + z.toFixed(2) + " for " + body.correction +
      " at alpha " + body.alpha + ", se the median standard error " + fixed(se, 1) +
      "); each bar's own threshold is in its tooltip. Hover a bar, or focus the chart and use the arrow keys." +
      ($("est-nonneg").checked ? " Shown as max(0, x): each estimate is unbiased, so small counts fall below 0 about " +
        "half the time; the CSV keeps the unbiased values." : "");
  }

  function showEstimatesAs(table) {
    $("est-as-chart").setAttribute("aria-pressed", table ? "false" : "true");
    $("est-as-table").setAttribute("aria-pressed", table ? "true" : "false");
    $("estimates-table").hidden = !table;
    $("estimates-figure").hidden = table;
    renderEstimatesTable();
  }

  function toggleSort(key) {
    if (state.sort.key === key) {
      state.sort.descending = !state.sort.descending;
    } else {
      state.sort = { key: key, descending: key === "estimate" };
    }
    renderEstimatesTable();
  }

  // The API's own CSV (format=csv) of the last answer's request, saved as a file.
  async function downloadCsv(kind, fields) {
    const body = Object.assign({}, fields, { format: "csv" });
    const response = await request("POST", metricPath(state.metric.name, "/" + kind), { body: body, accept: "text/csv" });
    const text = await response.text();
    const blob = new Blob([text], { type: "text/csv" });
    const link = document.createElement("a");
    link.href = URL.createObjectURL(blob);
    link.download = state.metric.name + "-" + kind + "-window" + (response.headers.get("X-Onesided-Window") || "") +
      "-round" + (response.headers.get("X-Onesided-Round") || "") + ".csv";
    document.body.appendChild(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(link.href), 10000);
  }

  function estimateFields() {
    const b = state.estimates;
    const fields = collectionFields();
    if (b) {
      fields.window = b.window;
      fields.round = b.round;
      fields.alpha = b.alpha;
    }
    return fields;
  }

  // ---------------------------------------------------------------- certificates

  async function loadCertificates() {
    const n = begin("certificates");
    const summary = $("certificates-summary");
    summary.textContent = "";  // no stale certificates next to an error
    $("certificates-result").hidden = true;
    state.certificates = null;
    clear($("safe-list"));
    const fields = collectionFields();
    fields.threshold = typedNumber($("threshold").value);  // the API validates and names the field
    fields.alpha = typedNumber($("cert-alpha").value);
    const body = await api("POST", metricPath(state.metric.name, "/certificates"), { body: fields });
    if (!isLatest("certificates", n)) return;
    if (body.reason) {
      summary.textContent = header(body) + " · " + body.reason;
      return;
    }
    state.certificates = body;
    summary.textContent = "threshold " + body.threshold + ", alpha " + body.alpha + ": " + body.safe +
      " safe, " + (body.rows.length - body.safe) + " obscure of " + body.rows.length + " candidates · " +
      header(body);
    $("certificates-result").hidden = false;
    certificateCounts($("cert-counts"), body);
    certificateMap($("cert-map"), body);
    renderSafeList(body);
  }

  function renderSafeList(body) {
    const list = $("safe-list");
    const safe = body.rows.filter((row) => row.safe);
    for (const row of safe.slice(0, MAX_SAFE_SHOWN)) {
      const li = el("li", row.candidate);
      li.title = "upper bound " + row.upper_bound;
      list.appendChild(li);
    }
    const more = $("safe-more");
    more.hidden = safe.length > 0 && safe.length <= MAX_SAFE_SHOWN;
    more.textContent = safe.length ? "and " + (safe.length - MAX_SAFE_SHOWN) + " more" : "none at this threshold";
  }

  // One bar split in two: safe and not certified, with their counts.
  function certificateCounts(container, body) {
    clear(container);
    const total = body.rows.length;
    const width = Math.min(760, chartWidth(container));
    const root = svg("svg", { class: "cert-counts", width: width, height: 58, viewBox: "0 0 " + width + " 58" });
    const x = linear(0, Math.max(1, total), 0, width - 2);
    root.appendChild(svg("rect", { class: "cell safe", x: 1, y: 4, width: x(body.safe), height: 18 }));
    root.appendChild(svg("rect", { class: "cell obscure", x: 1 + x(body.safe), y: 4, width: x(total - body.safe),
      height: 18 }));
    const safeText = svg("text", { class: "count safe-count", x: 1, y: 42 }, body.safe + " certified safe");
    const obscureText = svg("text", { class: "count obscure-count", x: width - 2, y: 42, "text-anchor": "end" },
      (total - body.safe) + " not certified");
    root.appendChild(safeText);
    root.appendChild(obscureText);
    root.setAttribute("role", "img");
    root.setAttribute("aria-label", body.safe + " of " + total + " candidates certified safe at threshold " +
      body.threshold + ", alpha " + body.alpha);
    container.appendChild(root);
  }

  // A map when every candidate carries "@x,y", groups when some carry "group/",
  // else one grid in the API's order. Filled green: safe; outlined: not certified.
  function certificateMap(container, body) {
    clear(container);
    const cells = body.rows.map((row) => Object.assign({ row: row }, candidateLabels(row.candidate)));
    const mapped = cells.length > 0 && cells.every((c) => c.x !== null);
    const grouped = !mapped && cells.some((c) => c.group !== null);
    const layout = mapped ? "map" : grouped ? "groups" : "grid";
    $("cert-layout").textContent = mapped ? "map: the candidates' @x,y coordinates" :
      grouped ? "grouped by the candidates' group/ prefix" : "one cell per candidate, in the API's order";
    const width = chartWidth(container);
    const root = svg("svg", { class: "cert-map " + layout, "data-layout": layout });
    const placed = mapped ? placeOnMap(cells, width) : placeInGroups(cells, width, grouped, root);
    const items = [];
    for (const c of placed.cells) {
      const g = svg("g", { class: "cell-item " + (c.row.safe ? "safe" : "obscure") });
      g.dataset.candidate = c.row.candidate;
      g.appendChild(svg("rect", { class: "cell " + (c.row.safe ? "safe" : "obscure"), x: c.px, y: c.py,
        width: placed.size, height: placed.size, rx: 2 }));
      root.appendChild(g);
      items.push({ node: g, text: c.row.candidate + ": " + (c.row.safe ? "certified safe" : "not certified") +
        " · upper bound " + c.row.upper_bound + (c.row.safe ? " ≤ " : " > ") + body.threshold });
    }
    legend(root, 0, placed.height + 18, [["safe", "certified safe"], ["obscure", "not certified"]]);
    const height = placed.height + 26;
    const used = Math.min(width, Math.max(280, ...placed.cells.map((c) => c.px + placed.size + 2)));
    root.setAttribute("width", used);
    root.setAttribute("height", height);
    root.setAttribute("viewBox", "0 0 " + used + " " + height);
    container.appendChild(root);
    interactive(root, items, "certificates, " + layout);
    $("cert-caption").textContent = (mapped ? "Each square sits at its candidate's coordinates (y up). " :
      grouped ? "One block per group. " : "") + "Green squares: certified count ≤ " + body.threshold +
      " with error at most " + body.alpha + " each; outlined: not certified (the count may be larger, or the data " +
      "are too noisy to tell). Hover a square, or focus the picture and use the arrow keys.";
  }

  function placeOnMap(cells, width) {
    const xs = cells.map((c) => c.x);
    const ys = cells.map((c) => c.y);
    const [x0, x1, y0, y1] = [Math.min(...xs), Math.max(...xs), Math.min(...ys), Math.max(...ys)];
    const integral = xs.concat(ys).every((v) => Number.isInteger(v)) && x1 - x0 <= 400 && y1 - y0 <= 400;
    const size = integral ? Math.max(4, Math.min(26, Math.floor((width - 10) / (x1 - x0 + 1)) - 2)) : 10;
    const step = size + 2;
    const span = integral ? null : Math.max(x1 - x0, y1 - y0) || 1;
    const plot = Math.min(width - 20, 520);
    const out = cells.map((c) => {
      if (integral) return Object.assign(c, { px: (c.x - x0) * step + 1, py: (y1 - c.y) * step + 1 });
      return Object.assign(c, { px: ((c.x - x0) / span) * plot + 1, py: ((y1 - c.y) / span) * plot + 1 });
    });
    out.sort((a, b) => a.py - b.py || a.px - b.px);  // keyboard order: rows from the top, left to right
    const height = integral ? (y1 - y0 + 1) * step + 2 : ((y1 - y0) / span) * plot + size + 2;
    return { cells: out, size: size, height: height };
  }

  function placeInGroups(cells, width, grouped, root) {
    const size = cells.length > 600 ? 10 : 16;
    const step = size + 2;
    const perRow = Math.max(1, Math.floor((width - 2) / step));
    const groups = new Map();
    for (const c of cells) {
      const key = grouped ? (c.group === null ? "(no group)" : c.group) : "";
      if (!groups.has(key)) groups.set(key, []);
      groups.get(key).push(c);
    }
    const out = [];
    let y = 0;
    for (const [name, members] of groups) {
      if (grouped) {
        const safe = members.filter((c) => c.row.safe).length;
        const title = svg("text", { class: "group-label", x: 0, y: y + 14 }, name + " · " + safe + " of " +
          members.length + " safe");
        title.dataset.group = name;
        root.appendChild(title);
        y += 20;
      }
      members.forEach((c, i) => {
        out.push(Object.assign(c, { px: (i % perRow) * step + 1, py: y + Math.floor(i / perRow) * step + 1 }));
      });
      y += Math.ceil(members.length / perRow) * step + (grouped ? 8 : 0);
    }
    return { cells: out, size: size, height: y };
  }

  function certificateFields() {
    const b = state.certificates;
    const fields = collectionFields();
    if (b) Object.assign(fields, { window: b.window, round: b.round, threshold: b.threshold, alpha: b.alpha });
    return fields;
  }

  // ---------------------------------------------------------------- releases (trusted metrics)

  async function loadReleases(metric) {
    const n = begin("releases");
    const box = $("releases");
    clear(box);
    clear($("budget-chart"));
    const listing = await api("GET", "/v1/releases", { query: { metric: metric.name } });
    const releases = listing.releases.slice().sort((a, b) => b.id - a.id);
    const windows = new Set(metric.collections.map((c) => c.window));
    for (const r of releases) windows.add(r.window);
    const ordered = Array.from(windows).sort((a, b) => b - a);
    const budgets = await Promise.all(ordered.map((w) =>
      api("GET", "/v1/releases/budget", { query: { metric: metric.name, window: w } })));
    if (!isLatest("releases", n)) return;
    budgetChart($("budget-chart"), budgets);
    $("releases-empty").hidden = releases.length > 0;
    for (const r of releases) box.appendChild(releaseCard(r));
  }

  function budgetChart(container, budgets) {
    clear(container);
    if (!budgets.length) {
      container.appendChild(el("p", "no window with reports yet", "muted"));
      return;
    }
    const { root, width, height, left, right, rowH, head } = rowFrame(container, "budget", budgets.length,
      { max: 820, left: 170, right: 300, rowH: 24, head: 26 });
    const limit = Math.max(...budgets.map((b) => b.limit));
    const x = linear(0, limit, left, width - right);
    xAxis(root, x, niceTicks(0, limit, 5), head, height - 4);
    const items = [];
    budgets.forEach((b, i) => {
      const y = head + i * rowH + 5;
      const g = svg("g", { class: "budget-row" });
      g.dataset.window = String(b.window);
      g.appendChild(svg("text", { class: "label", x: left - 8, y: y + 11, "text-anchor": "end" }, windowLabel(b.window)));
      g.appendChild(svg("rect", { class: "track", x: x(0), y: y, width: x(b.limit) - x(0), height: 14 }));
      g.appendChild(svg("rect", { class: "spent", x: x(0), y: y, width: (x(Math.min(b.spent, b.limit)) - x(0)).toFixed(2),
        height: 14 }));
      const text = "spent " + b.spent.toFixed(2) + " of " + b.limit.toFixed(2) + " · remaining " + b.remaining.toFixed(2);
      g.appendChild(svg("text", { class: "value", x: width - right + 8, y: y + 11 }, text));
      root.appendChild(g);
      items.push({ node: g, text: "window " + windowLabel(b.window) + ": epsilon " + text });
    });
    container.appendChild(root);
    interactive(root, items, "your epsilon budget per window");
  }

  function releaseCard(r) {
    const card = el("article", null, "release");
    card.dataset.release = String(r.id);
    const safe = r.answers.filter((a) => a.safe === true).length;
    card.appendChild(el("h4", "release " + r.id + " · " + r.mechanism + " · epsilon " + r.epsilon +
      (r.levels.length > 1 ? " (relaxed " + r.levels.join(" → ") + ")" : "")));
    card.appendChild(el("p", "window " + windowLabel(r.window) + " · threshold " + r.threshold + " · grid " + r.grid +
      " · sensitivity " + r.sensitivity + (r.group ? " · correlated group " + r.group : "") + " · " + safe + " of " +
      r.answers.length + " places safe", "release-summary"));
    if (r.certificate) card.appendChild(el("p", r.certificate, "release-certificate"));
    if (r.guarantee && r.guarantee.neighbour) card.appendChild(el("p", r.guarantee.neighbour, "muted"));
    const chart = el("div", null, "chart");
    card.appendChild(chart);
    answersChart(chart, r);
    return card;
  }

  // The release's answers per place (first MAX_RELEASE_ROWS), the threshold as a line.
  function answersChart(container, r) {
    const rows = r.answers.slice(0, MAX_RELEASE_ROWS);
    const { root, width, height, left, right, rowH, head } = rowFrame(container, "answers", rows.length,
      { left: 210, right: 130, rowH: 16, head: 40 });
    const values = rows.map((a) => a.answer).filter((v) => typeof v === "number");
    const lo = Math.min(0, ...values);
    const hi = Math.max(1, r.threshold, ...values);
    const x = linear(lo, hi, left, width - right);
    legend(root, left, 12, [["safe", "safe"], ["unsafe", "not safe"], ["threshold-key", "threshold"]]);
    xAxis(root, x, niceTicks(lo, hi, 6), head, height - 4);
    const items = [];
    rows.forEach((a, i) => {
      const y = head + i * rowH;
      const kind = a.safe === true ? "safe" : a.safe === false ? "unsafe" : "unanswered";
      const g = svg("g", { class: "answer " + kind });
      g.dataset.place = a.place;
      g.appendChild(svg("text", { class: "label", x: left - 8, y: y + 12, "text-anchor": "end" }, shortLabel(a.place, left - 10)));
      let shown;
      if (typeof a.answer === "number") {
        g.appendChild(svg("rect", { class: "bar", x: x(Math.min(0, a.answer)), y: y + 3,
          width: Math.max(0.5, Math.abs(x(a.answer) - x(0))), height: 10 }));
        shown = String(a.answer);
      } else {
        shown = a.safe === true ? "below threshold" : "not answered";
      }
      g.appendChild(svg("text", { class: "value", x: width - right + 8, y: y + 12 }, shown));
      root.appendChild(g);
      items.push({ node: g, text: a.place + ": answer " + shown + " · " +
        (kind === "safe" ? "safe" : kind === "unsafe" ? "not safe" : "not answered") });
    });
    root.appendChild(svg("line", { class: "threshold", x1: x(r.threshold), x2: x(r.threshold), y1: head - 2,
      y2: height - 4 }));
    container.appendChild(root);
    interactive(root, items, "release " + r.id + " answers");
    if (r.answers.length > rows.length) {
      container.appendChild(el("p", "first " + rows.length + " of " + r.answers.length + " places drawn", "muted"));
    }
  }

  // ---------------------------------------------------------------- reset and wiring

  // A new window, round or candidate list: the answers about the old selection leave the screen.
  function selectionChanged() {
    for (const kind of ["estimates", "certificates"]) begin(kind);
    state.rows = [];
    state.estimates = null;
    state.certificates = null;
    $("estimates-summary").textContent = "selection changed: load the estimates again";
    $("certificates-summary").textContent = "";
    $("certificates-result").hidden = true;
    renderEstimates();
  }

  function resetResults() {
    for (const kind of ["estimates", "certificates", "compare", "releases", "rounds"]) begin(kind);
    state.rows = [];
    state.estimates = null;
    state.certificates = null;
    $("estimates-summary").textContent = "";
    $("certificates-summary").textContent = "";
    $("certificates-result").hidden = true;
    $("compare-summary").textContent = "";
    $("compare-figure").hidden = true;
    clear($("compare-chart"));
    clear($("rounds"));
    clear($("releases"));
    clear($("budget-chart"));
    renderEstimates();
  }

  // Run an action; its failure goes to the message area, success clears it.
  async function run(action) {
    try {
      await action();
      clearMessage();
    } catch (err) {
      showError(err);
    }
  }

  function submit(id, action) {
    $(id).addEventListener("submit", (event) => {
      event.preventDefault();
      run(action);
    });
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
    $("collection-form").addEventListener("submit", (event) => event.preventDefault());
    submit("estimates-form", loadEstimates);
    submit("certificates-form", loadCertificates);
    submit("compare-form", loadComparison);
    $("detected-only").addEventListener("change", renderEstimates);
    $("est-nonneg").addEventListener("change", renderEstimates);
    for (const id of ["est-window", "est-round"]) $(id).addEventListener("change", selectionChanged);
    $("candidates").addEventListener("input", selectionChanged);
    $("est-top").addEventListener("change", renderEstimatesChart);
    $("est-as-chart").addEventListener("click", () => showEstimatesAs(false));
    $("est-as-table").addEventListener("click", () => showEstimatesAs(true));
    $("est-csv").addEventListener("click", () => run(() => downloadCsv("estimates", estimateFields())));
    $("cert-csv").addEventListener("click", () => run(() => downloadCsv("certificates", certificateFields())));
    for (const button of document.querySelectorAll("button.sort")) {
      button.addEventListener("click", () => toggleSort(button.dataset.sort));
    }
    for (const tab of document.querySelectorAll("#view-tabs [role=tab]")) {
      tab.addEventListener("click", () => selectView(tab.dataset.view, true));
    }
    $("view-tabs").addEventListener("keydown", tabKeys);
    document.addEventListener("keydown", (event) => {
      if (event.key === "Escape") hideTip();
    });
    const saved = sessionStorage.getItem(TOKEN_KEY);
    if (saved) {
      setToken(saved);
      run(loadMetrics);
    }
  }

  document.addEventListener("DOMContentLoaded", start);
})();

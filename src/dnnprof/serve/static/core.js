// dnnprof view: shared helpers. Every string from a trace goes into the page through textContent or an
// attribute set by the DOM API, never through innerHTML.
"use strict";
window.DV = (function () {
  const embeddedEl = document.getElementById("dnnprof-data");
  const embedded = embeddedEl ? JSON.parse(embeddedEl.textContent) : null;
  const views = [];

  function h(tag, attrs, ...kids) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") el.className = v;
      else if (k === "text") el.textContent = v;
      else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
      else el.setAttribute(k, v);
    }
    for (const kid of kids.flat(Infinity)) {
      if (kid === null || kid === undefined || kid === false) continue;
      el.appendChild(typeof kid === "string" || typeof kid === "number" ? document.createTextNode(String(kid)) : kid);
    }
    return el;
  }

  const nf = (d) => new Intl.NumberFormat("en", { maximumFractionDigits: d });
  function us(v) {
    if (v === null || v === undefined) return "–";
    const a = Math.abs(v);
    if (a >= 1e6) return nf(2).format(v / 1e6) + " s";
    if (a >= 1e3) return nf(2).format(v / 1e3) + " ms";
    return nf(1).format(v) + " µs";
  }
  function bytes(v) {
    if (v === null || v === undefined) return "–";
    const u = ["B", "KiB", "MiB", "GiB", "TiB"]; let i = 0;
    while (Math.abs(v) >= 1024 && i < u.length - 1) { v /= 1024; i++; }
    return nf(i ? 2 : 0).format(v) + " " + u[i];
  }
  const pct = (v) => (v === null || v === undefined ? "–" : nf(1).format(v) + " %");
  const num = (v, d = 2) => (v === null || v === undefined ? "–" : nf(d).format(v));

  // Local answers for a self-contained page: the same names and parameters as the server's endpoints.
  function localAnswer(path, params) {
    const [head, name] = path.split("/");
    if (path === "inputs" || path === "diff") return embedded[path];
    if (name === "kernels") {
      const all = embedded[head + "/kernels"].rows;
      const q = (params.q || "").toLowerCase(), phase = params.phase || "";
      let rows = all.filter((r) => (!q || (r.name || "").toLowerCase().includes(q) ||
        (r.layer || "").toLowerCase().includes(q) || (r.op || "").toLowerCase().includes(q)) &&
        (!phase || r.phase === phase));
      const key = params.sort || "total_us", desc = params.desc !== "0";
      rows = rows.slice().sort((a, b) => {
        const x = a[key], y = b[key];
        if (x === y) return (a.name < b.name ? -1 : 1);
        if (x === null || x === undefined) return 1;
        if (y === null || y === undefined) return -1;
        return (x < y ? -1 : 1) * (desc ? -1 : 1);
      });
      const total = rows.reduce((s, r) => s + r.total_us, 0) || 1;
      const off = +(params.offset || 0), lim = +(params.limit || 100);
      return { rows: rows.slice(off, off + lim).map((r) => ({ ...r, pct_filtered: 100 * r.total_us / total })),
               matched: rows.length, offset: off, limit: lim };
    }
    if (name === "layer") {
      return { layer: params.name, rows: embedded[head + "/layer-all"].rows.filter((r) => r.layer === params.name) };
    }
    if (name === "perfetto") return null;
    const v = embedded[path];
    if (v === undefined) throw new Error("not in this file: " + path);
    return v;
  }

  async function get(path, params) {
    params = params || {};
    if (embedded) return localAnswer(path, params);
    const qs = new URLSearchParams(params).toString();
    const r = await fetch("/api/" + path + (qs ? "?" + qs : ""));
    if (!r.ok) throw new Error(path + ": HTTP " + r.status);
    return r.json();
  }

  function apiUrl(path) { return embedded ? null : "/api/" + path; }

  // A table of rows: columns [{key, label, fmt, cls, title}], sortable by clicking a header (onSort given) and
  // with full values on hover for name columns.
  function table(cols, rows, opts) {
    opts = opts || {};
    const head = h("tr", {}, cols.map((c) => {
      const mark = opts.sort === c.key ? (opts.desc ? " ▼" : " ▲") : "";
      return h("th", { "data-key": c.key, onclick: opts.onSort ? () => opts.onSort(c.key) : null }, c.label + mark);
    }));
    const body = rows.map((r) => h("tr", { onclick: opts.onRow ? () => opts.onRow(r) : null }, cols.map((c) => {
      const v = r[c.key];
      const text = c.fmt ? c.fmt(v, r) : (v === null || v === undefined ? "" : String(v));
      return h("td", { class: c.cls || "", title: c.cls === "name" ? String(v ?? "") : null }, text);
    })));
    return h("table", { class: "grid", id: opts.id || null }, h("thead", {}, head), h("tbody", {}, body));
  }

  function panel(title, ...kids) { return h("div", { class: "panel" }, title ? h("h2", { text: title }) : null, ...kids); }
  function card(k, v) { return h("div", { class: "card" }, h("div", { class: "k", text: k }), h("div", { class: "v", text: v })); }

  // A phase split bar: widths through the CSSOM (allowed by the CSP), no style attributes in markup.
  function split(parts, total) {
    const bar = h("span", { class: "split", title: Object.entries(parts).map(([k, v]) => k + " " + us(v)).join(", ") });
    for (const ph of ["forward", "backward", "optimizer", "other"]) {
      const v = parts[ph] || 0; if (!v || !total) continue;
      const s = h("span", { class: "ph-" + ph }); s.style.width = (100 * v / total).toFixed(1) + "%"; bar.appendChild(s);
    }
    return bar;
  }

  function view(id, label, render, when) { views.push({ id, label, render, when: when || (() => true) }); }

  return { h, us, bytes, pct, num, get, apiUrl, table, panel, card, split, view, views, embedded,
           state: { input: 0, inputs: [] } };
})();

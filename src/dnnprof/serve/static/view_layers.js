// Layers as the module tree (time rolled up to every parent, phase split per node), the roll-up by module type,
// and the drill-down layer -> op -> kernel.
"use strict";
(function (DV) {
  const { h, us, pct, num } = DV;
  const PH = ["forward", "backward", "optimizer", "other"];

  function parse(layer) {
    const m = /^(.*) \(([^()]*)\)$/.exec(layer);
    const path = m ? m[1] : layer, type = m ? m[2] : "";
    const parts = /^[\w.]+$/.test(path) ? path.split(".") : [path];
    return { parts: parts.length ? parts : ["(unattributed)"], type };
  }
  function node(name) { return { name, full: null, type: "", self: {}, total: {}, sum: 0, kids: new Map() }; }

  function build(rows) {
    const root = node("(all)");
    for (const r of rows) {
      const { parts, type } = parse(r.layer || "(unattributed)");
      let n = root; const chain = [root];
      parts.forEach((p, j) => { if (!n.kids.has(p)) n.kids.set(p, node(parts.slice(0, j + 1).join("."))); n = n.kids.get(p); chain.push(n); });
      n.full = r.layer; if (type) n.type = type;
      n.self[r.phase] = (n.self[r.phase] || 0) + r.total_us;
      for (const c of chain) { c.total[r.phase] = (c.total[r.phase] || 0) + r.total_us; c.sum += r.total_us; }
    }
    return root;
  }

  function treeItem(n, all, depth, onPick) {
    const kids = Array.from(n.kids.values()).sort((a, b) => b.sum - a.sum);
    const sub = h("ul", {}); let open = depth < 2;
    const tog = h("span", { class: "tog", text: kids.length ? (open ? "▾" : "▸") : "·" });
    const row = h("div", { class: "row", "data-layer": n.full || n.name },
      tog, h("span", { class: "lbl", title: n.full || n.name, text: (n.name.split(".").pop() || n.name) + (n.type ? " (" + n.type + ")" : "") }),
      h("span", { class: "num", text: us(n.sum) }), h("span", { class: "muted", text: pct(100 * n.sum / all) }), DV.split(n.total, n.sum));
    const li = h("li", {}, row, sub);
    function fill() { sub.replaceChildren(...kids.map((k) => treeItem(k, all, depth + 1, onPick))); }
    if (open) fill();
    row.addEventListener("click", () => {
      if (kids.length) { open = !open; tog.textContent = open ? "▾" : "▸"; if (open && !sub.children.length) fill(); sub.hidden = !open; }
      if (n.full) onPick(n.full);
    });
    return li;
  }

  DV.view("layers", "Layers", async (root, inp, i) => {
    const { rows } = await DV.get(i + "/layers");
    const tree = build(rows), all = tree.sum || 1;
    const detail = h("div", { id: "layer-detail" }, h("p", { class: "muted", text: "Click a layer to see its ops and kernels." }));
    async function pick(layer) {
      const d = await DV.get(i + "/layer", { name: layer });
      const ops = new Map();
      for (const r of d.rows) { const o = ops.get(r.op) || { op: r.op || "(no op)", total_us: 0, calls: 0, kernels: [] }; o.total_us += r.total_us; o.calls += r.calls; o.kernels.push(r); ops.set(r.op, o); }
      const flat = [];
      for (const o of Array.from(ops.values()).sort((a, b) => b.total_us - a.total_us)) {
        flat.push({ what: o.op, phase: "", calls: o.calls, total_us: o.total_us, level: "op" });
        for (const k of o.kernels) flat.push({ what: "  " + k.name, phase: k.phase, calls: k.calls, total_us: k.total_us, level: "kernel" });
      }
      detail.replaceChildren(h("h2", { text: layer }), DV.table([{ key: "level", label: "" }, { key: "what", label: "op / kernel", cls: "name" },
        { key: "phase", label: "phase" }, { key: "calls", label: "calls", cls: "num", fmt: (v) => num(v, 0) },
        { key: "total_us", label: "GPU time", cls: "num", fmt: us }], flat));
    }
    const types = new Map();
    (function walk(n) { if (n.type) { const t = types.get(n.type) || { type: n.type, count: 0, total_us: 0 }; t.count++; t.total_us += n.sum; types.set(n.type, t); } n.kids.forEach(walk); })(tree);
    const legend = h("div", { class: "legend" }, PH.map((p) => [h("span", { class: "ph-" + p }), p]));
    root.append(DV.panel("Module tree (GPU time rolled up to parents)", legend,
      h("div", { class: "tree" }, h("ul", {}, Array.from(tree.kids.values()).sort((a, b) => b.sum - a.sum).map((k) => treeItem(k, all, 0, pick))))));
    root.append(DV.panel("Drill-down", detail));
    root.append(DV.panel("By module type", DV.table([{ key: "type", label: "type" }, { key: "count", label: "modules", cls: "num" },
      { key: "total_us", label: "GPU time", cls: "num", fmt: us }, { key: "pct", label: "share", cls: "num", fmt: pct }],
      Array.from(types.values()).sort((a, b) => b.total_us - a.total_us).map((t) => ({ ...t, pct: 100 * t.total_us / all })))));
  }, DV.isProfile);
})(window.DV);

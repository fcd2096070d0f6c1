// Findings with their evidence: numbers and top offenders, as the rules returned them.
"use strict";
(function (DV) {
  const { h, panel } = DV;
  function evidence(ev) {
    const box = h("div");
    for (const [k, v] of Object.entries(ev || {})) {
      if (Array.isArray(v) && v.length && typeof v[0] === "object" && v[0] !== null) {
        const keys = Array.from(new Set(v.flatMap((r) => Object.keys(r))));
        box.append(h("h3", { text: k }), DV.table(keys.map((c) => ({ key: c, label: c, cls: /kernel|layer|op|name/.test(c) ? "name" : "",
          fmt: (x) => (x === null || x === undefined ? "" : typeof x === "object" ? JSON.stringify(x) : String(x)) })), v));
      } else box.append(h("div", {}, h("b", { text: k + ": " }), typeof v === "object" ? JSON.stringify(v) : String(v)));
    }
    return box;
  }
  DV.view("findings", "Findings", async (root, inp, i) => {
    const s = (await DV.get(i + "/overview")).summary, f = s.findings || [];
    if (!f.length) root.append(panel("Findings", h("p", { class: "muted", text: "No findings." })));
    for (const x of f) root.append(panel(null, h("h2", {}, h("span", { class: "sev-" + x.severity, text: x.severity + " · " }), h("code", { text: x.id }), " " + x.title),
      x.fix ? h("p", {}, h("b", { text: "Fix: " }), String(x.fix)) : null, evidence(x.evidence)));
    const checks = s.checks || [];
    if (checks.length) root.append(panel("Self-checks", h("pre", { class: "evidence", text: JSON.stringify(checks, null, 1) })));
  }, DV.isProfile);
})(window.DV);

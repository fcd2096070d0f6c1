// Diff: two runs side by side (analysis.diff).
"use strict";
(function (DV) {
  const { h, panel } = DV;
  function cell(v) { return v === null || v === undefined ? "" : typeof v === "object" ? JSON.stringify(v) : String(v); }
  DV.view("diff", "Diff", async (root) => {
    const profs = DV.state.inputs.filter((x) => x.kind === "profile");
    const d = await DV.get("diff", { base: String(profs[0].id), new: String(profs[1].id) });
    root.append(panel("Diff: " + d.base + " → " + d.new, h("p", { class: "muted", text: "base = first input, new = second input" })));
    for (const [k, v] of Object.entries(d.diff || {})) {
      if (Array.isArray(v) && v.length && typeof v[0] === "object") {
        const keys = Array.from(new Set(v.flatMap((r) => Object.keys(r))));
        root.append(panel(k, DV.table(keys.map((c) => ({ key: c, label: c, cls: c === "name" || c === "layer" ? "name" : "", fmt: cell })), v)));
      } else if (v && typeof v === "object") {
        root.append(panel(k, DV.table([{ key: "k", label: "" }, { key: "v", label: "", fmt: cell }], Object.entries(v).map(([a, b]) => ({ k: a, v: b })))));
      } else root.append(panel(k, h("p", { text: cell(v) })));
    }
  }, (inp, inputs) => inputs.filter((x) => x.kind === "profile").length >= 2);
})(window.DV);

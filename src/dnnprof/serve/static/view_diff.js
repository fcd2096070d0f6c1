// Diff: two runs side by side (analysis.diff); with more than two inputs, a picker says which two.
"use strict";
(function (DV) {
  const { h, panel } = DV;
  function cell(v) { return v === null || v === undefined ? "" : typeof v === "object" ? JSON.stringify(v) : String(v); }

  function drawDiff(out, d) {
    out.replaceChildren(panel("Diff: " + d.base + " → " + d.new, h("p", { class: "muted", id: "diff-pair", text: "base = " + d.base + ", new = " + d.new })));
    for (const [k, v] of Object.entries(d.diff || {})) {
      if (Array.isArray(v) && v.length && typeof v[0] === "object") {
        const keys = Array.from(new Set(v.flatMap((r) => Object.keys(r))));
        out.append(panel(k, DV.table(keys.map((c) => ({ key: c, label: c, cls: c === "name" || c === "layer" ? "name" : "", fmt: cell })), v)));
      } else if (v && typeof v === "object") {
        out.append(panel(k, DV.table([{ key: "k", label: "" }, { key: "v", label: "", fmt: cell }], Object.entries(v).map(([a, b]) => ({ k: a, v: b })))));
      } else out.append(panel(k, h("p", { text: cell(v) })));
    }
  }

  DV.view("diff", "Diff", async (root) => {
    const profs = DV.state.inputs.filter((x) => x.kind === "profile");
    const ids = profs.map((x) => x.id);
    const pair = DV.state.diff && ids.includes(DV.state.diff.base) && ids.includes(DV.state.diff.new)
      ? DV.state.diff : { base: ids[0], new: ids[1] };
    DV.state.diff = pair;
    const out = h("div", { id: "diff-body" });
    async function load() {
      if (pair.base === pair.new) {
        out.replaceChildren(panel("Diff", h("p", { class: "muted", text: "Pick two different inputs." })));
        return;
      }
      const d = await DV.get("diff", { base: String(pair.base), new: String(pair.new) });
      drawDiff(out, d);
      document.body.dataset.diff = pair.base + "-" + pair.new;
    }
    if (profs.length > 2) {
      const select = (key, id) => {
        const s = h("select", { id, "aria-label": key }, profs.map((x) => h("option", { value: String(x.id) }, x.label)));
        s.value = String(pair[key]);
        s.addEventListener("change", () => { pair[key] = +s.value; load(); });
        return s;
      };
      root.append(h("div", { class: "toolbar" }, h("label", { text: "base " }), select("base", "diff-base"),
        h("label", { text: " new " }), select("new", "diff-new")));
    }
    root.append(out);
    await load();
  }, (inp, inputs) => inputs.filter((x) => x.kind === "profile").length >= 2);
})(window.DV);

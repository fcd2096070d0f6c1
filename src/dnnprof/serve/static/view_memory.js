// Memory: per-step peaks and what the memory holds (weights / gradients / optimizer state / activations).
"use strict";
(function (DV) {
  const { h, bytes, panel, card } = DV;
  DV.view("memory", "Memory", async (root, inp, i) => {
    const m = (await DV.get(i + "/overview")).summary.memory;
    if (!m) { root.append(panel("Memory", h("p", { class: "muted", text: "No memory record in this input (profile with profile_memory=True, or use dnnprof run)." }))); return; }
    root.append(h("div", { class: "cards" }, card("Device memory", bytes(m.device_total_bytes)), card("Peak allocated", bytes(m.peak_allocated_bytes)), card("Peak reserved", bytes(m.peak_reserved_bytes))));
    const ps = m.per_step;
    if (ps && ps.step && ps.step.length) {
      const el = h("div", { class: "chart" }); root.append(panel("Peak per step", el));
      DV.lines(el, [{ label: "allocated", x: ps.step, y: ps.peak_allocated_bytes }, { label: "reserved", x: ps.step, y: ps.peak_reserved_bytes }], "step", "bytes", bytes);
    }
    const b = m.breakdown || {};
    root.append(panel("What the memory holds", DV.table([{ key: "k", label: "part" }, { key: "v", label: "bytes", cls: "num", fmt: bytes }],
      Object.entries(b).map(([k, v]) => ({ k: k.replace(/_bytes$/, "").replace(/_/g, " "), v })))));
  }, DV.isProfile);
})(window.DV);

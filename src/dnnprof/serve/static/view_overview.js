// Overview: device, step time, throughput, busy %, per-step stacked chart, tensor cores, memory, top findings.
"use strict";
(function (DV) {
  const { h, us, pct, bytes, num, panel, card } = DV;
  DV.isProfile = (inp) => inp && inp.kind === "profile";
  DV.view("overview", "Overview", async (root, inp, i) => {
    const o = await DV.get(i + "/overview");
    const s = o.summary, g = s.gpu || {}, st = s.steps || {}, tp = s.throughput || {}, mem = s.memory || {};
    root.append(h("div", { class: "cards" },
      card("Device", (s.device && s.device.name) || "unknown"),
      card("Step time (median)", us(st.median_us)),
      card("Steps", String(st.count ?? "–")),
      tp.items_per_s ? card("Throughput", num(tp.items_per_s, 0) + " " + (tp.unit || "items/s")) : null,
      card("GPU busy", pct(g.busy_pct)),
      card("Tensor-core share", pct(g.tensor_core_pct)),
      mem.peak_allocated_bytes ? card("Peak memory", bytes(mem.peak_allocated_bytes)) : null,
      s.world_size ? card("Ranks", String(s.world_size)) : null));
    if (o.step_stack.length) {
      const el = h("div", { class: "chart", id: "step-chart" });
      root.append(panel("Per step: compute, exposed NCCL, exposed memcpy/memset, idle", el));
      const x = o.step_stack.map((r) => r.step);
      DV.stackedBars(el, x, [
        { label: "compute", values: o.step_stack.map((r) => r.compute_us), color: "#4e79a7" },
        { label: "NCCL", values: o.step_stack.map((r) => r.nccl_us), color: "#e15759" },
        { label: "memcpy", values: o.step_stack.map((r) => r.memcpy_us), color: "#edc948" },
        { label: "idle", values: o.step_stack.map((r) => r.idle_us), color: "#bab0ac" }], "time per step");
    }
    const idle = g.idle_breakdown_us || {};
    root.append(panel("GPU idle by cause", DV.table([{ key: "cause", label: "cause" }, { key: "us", label: "time", fmt: us, cls: "num" },
      { key: "pct", label: "of window", fmt: pct, cls: "num" }],
      Object.entries(idle).map(([k, v]) => ({ cause: k, us: v, pct: g.window_us ? 100 * v / g.window_us : null })))));
    const f = s.findings || [];
    root.append(panel("Findings at a glance (" + f.length + ")", f.length ? h("ul", {}, f.slice(0, 8).map((x) =>
      h("li", {}, h("span", { class: "sev-" + x.severity, text: x.severity + " " }), h("code", { text: x.id }), " ", x.title))) :
      h("p", { class: "muted", text: "No findings." })));
  }, DV.isProfile);
})(window.DV);

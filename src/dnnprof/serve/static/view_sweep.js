// Sweep: the four questions answered, and throughput, step time, memory and busy vs batch size per series.
"use strict";
(function (DV) {
  const { h, panel, num, bytes } = DV;
  DV.view("sweep", "Sweep", async (root, inp, i) => {
    const r = await DV.get(i + "/sweep"), sw = r.sweep || {};
    root.append(panel("Sweep: " + (sw.workload || "") + " on " + ((sw.device || {}).name || "?"), h("p", { class: "muted", text: "status " + (sw.status || "?") + ", " + (sw.trials_total ?? "?") + " trials" })));
    for (const [q, lines] of Object.entries(r.answers || {})) root.append(panel(q.replace(/_/g, " "), h("ul", {}, lines.map((l) => h("li", { text: l })))));
    const series = r.batch_size || [];
    const metric = (key, label, fmt) => {
      const ss = series.map((s) => ({ label: (s.precision || "") + " " + (s.mode || ""), pts: (s.rows || s.points || []).filter((p) => p[key] !== null && p[key] !== undefined) }))
        .filter((s) => s.pts.length).map((s) => ({ label: s.label, x: s.pts.map((p) => p.batch_size), y: s.pts.map((p) => p[key]) }));
      if (!ss.length) return;
      const el = h("div", { class: "chart" }); root.append(panel(label + " vs batch size", el)); DV.lines(el, ss, "batch size", label, fmt);
    };
    metric("throughput_samples_per_s", "throughput (samples/s)", (v) => num(v, 0)); metric("step_time_ms", "step time (ms)", (v) => num(v, 1));
    metric("peak_memory_bytes", "peak memory", bytes); metric("gpu_busy_pct", "GPU busy %", (v) => num(v, 1));
    root.append(panel("Largest batch", DV.table([{ key: "precision", label: "precision" }, { key: "mode", label: "mode" }, { key: "batch_size", label: "batch", cls: "num" }, { key: "limited_by", label: "limited by" }], r.max_batch_size || [])));
  }, (inp) => inp && inp.kind === "sweep");
})(window.DV);

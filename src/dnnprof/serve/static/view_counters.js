// GPU counters: NVML/GPM series sampled during the run, and their summary over the timed steps.
"use strict";
(function (DV) {
  const { h, num, panel } = DV;
  DV.view("counters", "GPU counters", async (root, inp, i) => {
    const s = await DV.get(i + "/samples");
    const names = Object.keys(s.series || {});
    if (!names.length) { root.append(panel("GPU counters", h("p", { class: "muted", text: "No NVML/GPM samples in this input (dnnprof run records them)." }))); return; }
    const pct = names.filter((n) => n.endsWith("_pct")), el = h("div", { class: "chart" });
    root.append(panel("Activity (%) over time", el));
    DV.lines(el, pct.map((n) => ({ label: n, x: s.series[n].t_s, y: s.series[n].value })), "s", "%");
    for (const n of names.filter((n) => !n.endsWith("_pct"))) {
      const e2 = h("div", { class: "chart" }); root.append(panel(n, e2));
      DV.lines(e2, [{ label: n, x: s.series[n].t_s, y: s.series[n].value }], "s", n);
    }
    const m = (s.summary && s.summary.metrics) || {};
    root.append(panel((s.summary && s.summary.window) === "the whole recording" ? "Over the whole recording" : "Over the timed steps", DV.table([{ key: "k", label: "metric" }, { key: "mean", label: "mean", cls: "num", fmt: (v) => num(v) },
      { key: "p90", label: "p90", cls: "num", fmt: (v) => num(v) }, { key: "max", label: "max", cls: "num", fmt: (v) => num(v) }], Object.entries(m).map(([k, v]) => ({ k, ...v })))));
  }, (inp) => (DV.isProfile(inp) && inp.has_samples) || (inp && inp.kind === "recording"));
})(window.DV);

// Memory: per-step peaks, what the memory holds (weights / gradients / optimizer state / activations), and the
// allocator timeline with the largest allocations when the input recorded memory events (profile_memory / --full).
"use strict";
(function (DV) {
  const { h, bytes, panel, card } = DV;
  DV.view("memory", "Memory", async (root, inp, i) => {
    const [o, tl] = await Promise.all([DV.get(i + "/overview"), DV.get(i + "/memory")]);
    const m = o.summary.memory, ev = o.summary.memory_events;
    if (!m && !(tl.devices || []).length) {
      root.append(panel("Memory", h("p", { class: "muted", text: "No memory record in this input (profile with profile_memory=True, or use dnnprof run --full)." })));
      return;
    }
    if (m) {
      root.append(h("div", { class: "cards" }, card("Device memory", bytes(m.device_total_bytes)), card("Peak allocated", bytes(m.peak_allocated_bytes)), card("Peak reserved", bytes(m.peak_reserved_bytes))));
      const ps = m.per_step;
      if (ps && ps.step && ps.step.length) {
        const el = h("div", { class: "chart" }); root.append(panel("Peak per step", el));
        DV.lines(el, [{ label: "allocated", x: ps.step, y: ps.peak_allocated_bytes }, { label: "reserved", x: ps.step, y: ps.peak_reserved_bytes }], "step", "bytes", bytes);
      }
      const b = m.breakdown || {};
      root.append(panel("What the memory holds", DV.table([{ key: "k", label: "part" }, { key: "v", label: "bytes", cls: "num", fmt: bytes }],
        Object.entries(b).map(([k, v]) => ({ k: k.replace(/_bytes$/, "").replace(/_/g, " "), v })))));
    }
    for (const d of tl.devices || []) {
      const el = h("div", { class: "chart memory-timeline", "data-device": d.label });
      const steps = (tl.steps || []).map((s) => "step " + s.step + " at " + DV.num(s.t_ms, 1) + " ms").join(", ");
      root.append(panel("Allocator timeline: " + d.label + " (" + DV.num(d.t_ms.length, 0) + " points of " + DV.num(tl.events, 0) + " events)", el,
        steps ? h("p", { class: "muted", text: "Steps: " + steps }) : null));
      const series = [{ label: "allocated", x: d.t_ms, y: d.allocated_bytes }];
      if (d.reserved_bytes.some((v) => v > 0)) series.push({ label: "reserved", x: d.t_ms, y: d.reserved_bytes });
      DV.lines(el, series, "ms", "bytes", bytes, { points: false, stepped: true });
    }
    if (ev) {
      root.append(h("div", { class: "cards" }, card("Allocations", DV.num(ev.allocations, 0)), card("Frees", DV.num(ev.frees, 0)),
        card("Bytes allocated", bytes(ev.allocated_bytes)), card("Bytes freed", bytes(ev.freed_bytes))));
      root.append(panel("Largest allocations", DV.table([{ key: "bytes", label: "bytes", cls: "num", fmt: bytes },
        { key: "device_type", label: "where" }, { key: "step", label: "step" }, { key: "op", label: "op", cls: "name" },
        { key: "layer", label: "layer", cls: "name" }, { key: "phase", label: "phase" }, { key: "source", label: "source", cls: "name" }],
        ev.largest_allocations || [], { id: "largest-allocations" })));
    }
  }, DV.isProfile);
})(window.DV);

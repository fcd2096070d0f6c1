// Ranks: per-GPU figures side by side, NCCL exposed vs overlapped, the straggler.
"use strict";
(function (DV) {
  const { h, us, pct, panel, card } = DV;
  DV.view("ranks", "Ranks", async (root, inp, i) => {
    const r = await DV.get(i + "/ranks"), rk = r.ranks || {};
    root.append(h("div", { class: "cards" }, card("Ranks", String(rk.count ?? "–")), card("Straggler", rk.straggler_rank === null || rk.straggler_rank === undefined ? "none" : "rank " + rk.straggler_rank),
      card("Straggler wait / step", us(rk.straggler_wait_us_per_step)), card("Step spread", pct(rk.step_median_spread_pct))));
    const rows = (rk.per_rank || []).map((x) => ({ ...x, overlapped_nccl_us_per_step: x.nccl_us_per_step - x.exposed_nccl_us_per_step,
      findings: ((r.per_rank[String(x.rank)] || {}).findings || []).map((f) => f.id).join(", ") }));
    root.append(panel("Per rank", DV.table([{ key: "rank", label: "rank" }, { key: "device", label: "GPU" }, { key: "step_median_us", label: "step (median)", cls: "num", fmt: us },
      { key: "busy_pct", label: "busy", cls: "num", fmt: pct }, { key: "compute_us_per_step", label: "compute/step", cls: "num", fmt: us },
      { key: "exposed_nccl_us_per_step", label: "NCCL exposed/step", cls: "num", fmt: us }, { key: "overlapped_nccl_us_per_step", label: "NCCL overlapped/step", cls: "num", fmt: us },
      { key: "findings", label: "findings", cls: "name" }], rows)));
    if (rows.length) {
      const el = h("div", { class: "chart" }); root.append(panel("Per rank: compute and NCCL per step", el));
      DV.stackedBars(el, rows.map((x) => x.rank), [{ label: "compute", values: rows.map((x) => x.compute_us_per_step) },
        { label: "NCCL exposed", values: rows.map((x) => x.exposed_nccl_us_per_step), color: "#e15759" },
        { label: "NCCL overlapped", values: rows.map((x) => x.overlapped_nccl_us_per_step), color: "#f28e2b" }], "per step");
    }
  }, (inp) => DV.isProfile(inp) && (inp.ranks || []).length > 1);
})(window.DV);

// Ranks: one panel per GPU (step time, busy, compute / NCCL / exposed, its phase split, its waits), the cross-rank
// critical path (which rank gated each step, in which phase and layer, how long the others waited) and the verdict.
"use strict";
(function (DV) {
  const { h, us, pct, panel, card } = DV;
  const PHASES = ["data_loading", "forward", "backward", "optimizer", "host"];
  const none = (v) => v === null || v === undefined;

  function verdictText(v) {
    if (!v) return "No rank made the others wait (every step's arrival spread is under the threshold).";
    return "Rank " + v.rank + " was the last to arrive in " + v.steps + " of " + v.of_steps + " steps, late in " +
      v.phase + (v.layer ? " (" + v.layer + ")" : "") + ": the others waited " + us(v.wait_us_per_step) +
      " per step; it spent " + us(v.excess_us_per_step) + " more in " + v.phase + " than the others' median.";
  }

  function rankPanel(row, full, cp, late) {
    const st = full.steps || {}, g = full.gpu || {}, ph = full.phases || {};
    const n = st.count || 1, phaseTotal = ["forward", "backward", "optimizer", "other"].reduce((s, k) => s + (ph[k + "_us"] || 0), 0);
    const parts = {}; for (const k of ["forward", "backward", "optimizer", "other"]) parts[k] = (ph[k + "_us"] || 0) / n;
    const dev = full.device && full.device.name ? full.device.name : "";
    const kids = [
      h("div", { class: "cards" }, card("Step (median)", us(row.step_median_us ?? st.median_us)), card("GPU busy", pct(row.busy_pct ?? g.busy_pct)),
        card("Compute / step", us(row.compute_us_per_step)), card("NCCL / step", us(row.nccl_us_per_step)),
        card("NCCL exposed / step", us(row.exposed_nccl_us_per_step))),
      h("p", {}, h("span", { class: "muted", text: "Phase split per step (GPU time): " }), DV.split(parts, phaseTotal / n), " ",
        h("span", { class: "phase-text", text: ["forward", "backward", "optimizer", "other"].map((k) => k + " " + us(parts[k])).join(" · ") })),
    ];
    if (cp) {
      kids.push(h("p", { class: "rank-comm" }, "Waited for the others " + us(cp.wait_us_per_step) + " / step; communication " +
        us(cp.comm_us_per_step) + " / step, of which overlapped " + us(cp.overlapped_comm_us_per_step) + ", exposed " +
        us(cp.exposed_comm_us_per_step) + "; last to arrive " + cp.last_arrivals + " time(s)."));
    }
    const f = full.findings || [];
    if (f.length) kids.push(h("p", {}, h("span", { class: "muted", text: "Findings: " }), f.map((x) => h("code", { text: x.id + " " }))));
    const title = "Rank " + row.rank + " · GPU " + (none(row.device) ? "?" : row.device) + (dev ? " · " + dev : "") + (late ? " · gated the steps" : "");
    const p = panel(title, ...kids);
    p.classList.add("rank-panel");
    if (late) p.classList.add("late");
    p.dataset.rank = String(row.rank);
    return p;
  }

  DV.view("ranks", "Ranks", async (root, inp, i) => {
    const r = await DV.get(i + "/ranks"), rk = r.ranks || {}, cp = r.critical_path || null, v = cp && cp.verdict;
    root.append(h("div", { class: "cards" }, card("Ranks", String(rk.count ?? "–")),
      card("Straggler", none(rk.straggler_rank) ? "none" : "rank " + rk.straggler_rank),
      card("Straggler wait / step", us(rk.straggler_wait_us_per_step)), card("Step spread", pct(rk.step_median_spread_pct)),
      v ? card("Gated by", "rank " + v.rank + " · " + v.phase) : null));
    if (cp) root.append(panel("Critical path across ranks", h("p", { id: "cp-verdict", text: verdictText(v) })));
    const cpRows = new Map(((cp && cp.per_rank) || []).map((x) => [x.rank, x]));
    const grid = h("div", { class: "rank-grid" });
    for (const row of rk.per_rank || []) {
      grid.append(rankPanel(row, (r.per_rank || {})[String(row.rank)] || {}, cpRows.get(row.rank), v && v.rank === row.rank));
    }
    root.append(grid);
    const rows = (rk.per_rank || []).map((x) => ({ ...x, overlapped_nccl_us_per_step: x.nccl_us_per_step - x.exposed_nccl_us_per_step }));
    if (rows.length) {
      const el = h("div", { class: "chart" }); root.append(panel("Per rank: compute and NCCL per step", el));
      DV.stackedBars(el, rows.map((x) => x.rank), [{ label: "compute", values: rows.map((x) => x.compute_us_per_step) },
        { label: "NCCL exposed", values: rows.map((x) => x.exposed_nccl_us_per_step), color: "#e15759" },
        { label: "NCCL overlapped", values: rows.map((x) => x.overlapped_nccl_us_per_step), color: "#f28e2b" }], "per step", "rank");
    }
    if (!cp) return;
    root.append(panel("Per step: the rank the others waited for", DV.table([
      { key: "step", label: "step" }, { key: "rank", label: "late rank", fmt: (x) => (none(x) ? "none" : String(x)) },
      { key: "phase", label: "phase", fmt: (x) => x || "–" }, { key: "layer", label: "layer", cls: "name", fmt: (x) => x || "–" },
      { key: "wait_us", label: "others waited", cls: "num", fmt: us },
      { key: "excess", label: "excess in that phase", cls: "num", fmt: us }],
      (cp.steps || []).map((s) => ({ ...s, excess: s.phase ? (s.phase_excess_us || {})[s.phase] : null })), { id: "cp-steps" })));
    const split = [];
    for (const s of cp.steps || []) {
      for (const [rank, d] of Object.entries(s.phase_us || {})) split.push({ step: s.step, rank, ...d });
    }
    root.append(panel("Time from the previous synchronisation to each rank's arrival, by phase", DV.table([
      { key: "step", label: "step" }, { key: "rank", label: "rank" },
      ...PHASES.map((p) => ({ key: p, label: p.replace("_", " "), cls: "num", fmt: us }))], split)));
    root.append(panel("Communication per rank", DV.table([{ key: "rank", label: "rank" }, { key: "collectives", label: "collectives", cls: "num" },
      { key: "wait_us_per_step", label: "wait / step", cls: "num", fmt: us }, { key: "comm_us_per_step", label: "comm / step", cls: "num", fmt: us },
      { key: "overlapped_comm_us_per_step", label: "overlapped / step", cls: "num", fmt: us },
      { key: "exposed_comm_us_per_step", label: "exposed / step", cls: "num", fmt: us },
      { key: "last_arrivals", label: "last arrivals", cls: "num" }], cp.per_rank || [])));
  }, (inp) => DV.isProfile(inp) && (inp.ranks || []).length > 1);
})(window.DV);

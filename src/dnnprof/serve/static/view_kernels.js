// Kernels grouped by name: sorted, filtered and paged by the server (or by the page when self-contained).
"use strict";
(function (DV) {
  const { h, us, pct, num } = DV;
  const COLS = [
    { key: "name", label: "kernel", cls: "name" }, { key: "calls", label: "calls", cls: "num", fmt: (v) => num(v, 0) },
    { key: "total_us", label: "total", cls: "num", fmt: us }, { key: "pct_filtered", label: "% of shown", cls: "num", fmt: pct },
    { key: "mean_us", label: "mean", cls: "num", fmt: us }, { key: "max_us", label: "max", cls: "num", fmt: us },
    { key: "est_occupancy_pct", label: "occupancy", cls: "num", fmt: pct },
    { key: "family", label: "class" }, { key: "phase", label: "phase" }, { key: "layer", label: "layer", cls: "name" },
    { key: "op", label: "op", cls: "name" }];
  const state = { sort: "total_us", desc: true, q: "", phase: "", offset: 0, limit: 50 };
  DV.view("kernels", "Kernels", async (root, inp, i) => {
    const out = h("div", { id: "kernel-table" }), info = h("span", { class: "muted" });
    const search = h("input", { type: "search", placeholder: "search kernel, layer or op", id: "kernel-search", value: state.q });
    const phase = h("select", { id: "kernel-phase" }, ["", "forward", "backward", "optimizer", "other"].map((p) =>
      h("option", { value: p, selected: p === state.phase ? "selected" : null }, p || "all phases")));
    const prev = h("button", { text: "◀ prev" }), next = h("button", { text: "next ▶" });
    async function load() {
      const r = await DV.get(i + "/kernels", { sort: state.sort, desc: state.desc ? "1" : "0", q: state.q, phase: state.phase,
                                               offset: String(state.offset), limit: String(state.limit) });
      info.textContent = r.matched ? `${state.offset + 1}–${state.offset + r.rows.length} of ${r.matched} kernels` : "no kernel matches";
      prev.disabled = state.offset === 0; next.disabled = state.offset + r.rows.length >= r.matched;
      out.replaceChildren(DV.table(COLS, r.rows, { sort: state.sort, desc: state.desc, onSort: (k) => {
        state.desc = state.sort === k ? !state.desc : k !== "name" && k !== "layer" && k !== "op" && k !== "phase" && k !== "family";
        state.sort = k; state.offset = 0; load(); } }));
      document.body.dataset.kernels = String((+document.body.dataset.kernels || 0) + 1);
    }
    let timer = null;
    search.addEventListener("input", () => { clearTimeout(timer); timer = setTimeout(() => { state.q = search.value; state.offset = 0; load(); }, 200); });
    phase.addEventListener("change", () => { state.phase = phase.value; state.offset = 0; load(); });
    prev.addEventListener("click", () => { state.offset = Math.max(0, state.offset - state.limit); load(); });
    next.addEventListener("click", () => { state.offset += state.limit; load(); });
    root.append(DV.panel("Kernels", h("div", { class: "toolbar" }, search, phase, prev, next, info), out));
    await load();
  }, DV.isProfile);
})(window.DV);

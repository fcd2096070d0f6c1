// Ops: GPU time by launching op, with the host time of ops of the same name.
"use strict";
(function (DV) {
  const { us, num } = DV;
  DV.view("ops", "Ops", async (root, inp, i) => {
    const { rows } = await DV.get(i + "/ops");
    let sort = "gpu_us", desc = true; const box = DV.h("div");
    function draw() {
      const r = rows.slice().sort((a, b) => ((a[sort] ?? -1) < (b[sort] ?? -1) ? -1 : 1) * (desc ? -1 : 1));
      box.replaceChildren(DV.table([{ key: "op", label: "op", cls: "name" }, { key: "gpu_us", label: "GPU time", cls: "num", fmt: us },
        { key: "kernel_calls", label: "kernel calls", cls: "num", fmt: (v) => num(v, 0) }, { key: "kernels", label: "kernels", cls: "num" },
        { key: "host_calls", label: "host calls", cls: "num", fmt: (v) => num(v, 0) }, { key: "host_us", label: "host time", cls: "num", fmt: us }],
        r, { sort, desc, onSort: (k) => { desc = sort === k ? !desc : true; sort = k; draw(); } }));
    }
    draw();
    root.append(DV.panel("Ops (GPU time by the op that launched it)", box));
  }, DV.isProfile);
})(window.DV);

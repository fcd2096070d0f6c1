"""The canonical tables as pandas DataFrames, for people: names decoded, enumerations as labels.

Each DataFrame has one row per row of the canonical table (``docs/profile-schema.md``), in the same order, so the
``*_row`` link columns (a kernel's ``op_row``, an op's ``parent_row`` …) are positions in the linked DataFrame.
Changes from the canonical columns, nothing else:

* ``*_id`` string columns become text columns without the suffix (``name_id`` → ``name``, "" for none);
* enumerations become their labels (``memcpy.kind`` 1 → ``"HtoD"``, ``ops.category``, ``steps.source`` …);
* ``kernels`` (and ``memcpy``) gain ``layer``, ``phase`` and ``op``: the module, training phase and launching op
  each GPU activity is attributed to (``analysis.attribution``), as the summary reports them.

Units stay in the column names (``start_ns``, ``dur_ns``, ``bytes``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dnnprof.model.profile import Profile as CanonicalProfile
from dnnprof.model.query import ENUMS, NOT_STRINGS

#: GPU tables that get their attribution columns.
ATTRIBUTED = ("kernels", "memcpy")


def pandas() -> Any:
    """The pandas module, or an ImportError saying how to get it."""
    try:
        import pandas as pd
    except ImportError:
        raise ImportError("dnnprof's DataFrames need pandas: pip install 'dnnprof[api]' (or pip install pandas)") \
            from None
    return pd


def labels(codes: np.ndarray, names: tuple[str, ...]) -> np.ndarray:
    """Enumeration codes as their labels ("unknown" for a code outside the list)."""
    lut = np.asarray([*names, "unknown"], dtype=object)
    codes = np.asarray(codes, dtype=np.int64)
    return lut[np.where((codes >= 0) & (codes < len(names)), codes, len(names))]


def table_frame(profile: CanonicalProfile, table: str) -> Any:
    """DataFrame of one canonical table (see the module docstring for what differs from the stored columns).

    Raises:
        KeyError: no such table (the message lists them).
    """
    pd = pandas()
    if table not in profile.tables:
        raise KeyError(f"no table {table!r}; tables: {', '.join(profile.tables)}")
    enums = ENUMS.get(table, {})
    cols: dict[str, Any] = {}
    for name, values in profile.tables[table].items():
        if name.endswith("_id") and name not in NOT_STRINGS:
            cols[name[:-3]] = profile.names(values)
        elif name in enums:
            cols[name] = labels(values, enums[name])
        else:
            cols[name] = values
    if table in ATTRIBUTED:
        from dnnprof.analysis.attribution import PHASES, attribute

        att = attribute(profile, table)
        cols["layer"] = att.layer
        cols["phase"] = labels(att.phase, PHASES)
        cols["op"] = att.op_name
    return pd.DataFrame(cols)


def layers_frame(kernels: Any) -> Any:
    """Kernel time per layer and rank, from :func:`table_frame` of ``kernels``: ``kernel_time_ns``,
    ``kernel_calls`` and ``kernel_time_pct`` (of the rank's kernel time), longest first. Kernels no layer
    was found for are one row with an empty ``layer``."""
    pd = pandas()
    if kernels.empty:
        return pd.DataFrame({"rank": pd.Series(dtype="int16"), "layer": pd.Series(dtype=object),
                             "kernel_time_ns": pd.Series(dtype="int64"), "kernel_calls": pd.Series(dtype="int64"),
                             "kernel_time_pct": pd.Series(dtype="float64")})
    g = kernels.groupby(["rank", "layer"], sort=False)["dur_ns"].agg(kernel_time_ns="sum", kernel_calls="size")
    g = g.reset_index()
    total = g.groupby("rank")["kernel_time_ns"].transform("sum")
    g["kernel_time_pct"] = np.where(total > 0, 100.0 * g["kernel_time_ns"] / total.where(total > 0, 1), 0.0)
    return g.sort_values(["rank", "kernel_time_ns"], ascending=[True, False], kind="stable").reset_index(drop=True)

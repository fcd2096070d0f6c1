"""``dnnprof view``: a local dashboard over saved profiles, queried through DuckDB (see docs/view.md)."""

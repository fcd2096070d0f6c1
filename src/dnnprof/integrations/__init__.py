"""Adapters that profile a training framework's loop through :mod:`dnnprof.api`: ``lightning.DnnprofProfiler``
(a Lightning ``Profiler``), ``hf.DnnprofCallback`` (a Hugging Face ``TrainerCallback``). Each imports its framework
only when its module is imported."""

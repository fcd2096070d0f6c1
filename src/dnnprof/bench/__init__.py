"""``dnnprof bench``'s measuring side: what to run (a workload, an ONNX file, a user's model), the backends that
run it (eager, CUDA graphs, torch.compile, ONNX Runtime, TensorRT, OpenVINO) and the timed loop.

It measures and returns raw samples; ``dnnprof.analysis.bench_report`` turns them into statistics, diagnoses
and the batch-size knee, and ``dnnprof.render.bench_table`` draws them.
"""

"""dnnprof.workloads"""

"""dnnprof.cli"""

"""dnnprof.collect"""

"""dnnprof.analysis"""

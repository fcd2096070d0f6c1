"""dnnprof.render"""

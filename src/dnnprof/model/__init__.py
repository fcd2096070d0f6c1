"""dnnprof.model"""

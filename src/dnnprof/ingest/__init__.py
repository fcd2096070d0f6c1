"""dnnprof.ingest"""

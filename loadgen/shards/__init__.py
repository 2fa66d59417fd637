"""One run over many processes or machines: the supervisor of --workers, the shared start of
--sync-dir, and the exact merge of shards into one result.
"""

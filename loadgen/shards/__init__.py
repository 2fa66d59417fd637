"""One run over many processes or machines: the supervisor of --workers, the shared start of
--sync-dir, and the exact merge of shards into one result.

- `supervisor.py` --workers N: N processes, one merged result
- `sync.py` --sync-dir: shards start their load at the same moment
- `merge.py` `python -m loadgen merge`: shards into one exact result
"""

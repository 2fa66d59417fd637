"""What a run takes in, read and checked alike by every layer: leaves, which import nothing
of loadgen outside this folder (the simulator reads JSON lines with them too).

- `jsonl.py` JSON-lines input read alike everywhere
- `bounds.py` the numeric flags' parsers: finite and in range
"""

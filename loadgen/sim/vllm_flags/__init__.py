"""vLLM's flags, with vLLM's names and meaning: `python -m loadgen.sim --preset NAME`
followed by the flags of a `vllm serve` line runs that deployment's engine settings on the
preset's model and hardware, as --virtual-args does on the virtual clock and a plan's
candidates do. Below the wire server and the twin, over the engine model.

- `table.py` the flags, read from a command line or one string; what is refused
- `engine.py` the engine flags applied to a preset, checked and warned as vLLM does
- `kv_cache.py` the KV cache the flags size, vLLM's refusal and its startup lines
"""

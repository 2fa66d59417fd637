"""loadgen.sim: a vLLM-like simulated upstream, for tests, benchmarks and demos without a GPU.

On the wire it speaks vLLM's OpenAI-compatible API; in time it follows either a performance
model of a model on given GPUs driven by a continuous-batching engine (a preset), or fixed
TTFT/ITL figures (an exact test upstream). `python -m loadgen.sim --help`; in-process:
`loadgen.sim.app.create_app`.
"""

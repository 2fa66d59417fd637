"""loadgen.sim: a vLLM-like simulated upstream, for tests, benchmarks and demos without a GPU.

On the wire it speaks vLLM's OpenAI-compatible API; in time it follows either a performance
model of a model on given GPUs driven by a continuous-batching engine (a preset), or fixed
TTFT/ITL figures (an exact test upstream). `python -m loadgen.sim --help`; in-process:
`loadgen.sim.wire.app.create_app`.

Five layers, each importing only those below it; the commands compose them:

- `model/` the engine model: a model on some GPUs, batching, the KV cache. Pure, no clock
- `vllm_flags/` vLLM's flags, read and applied to the engine model as vLLM applies them
- `realtime/` the engine model driven in real time, and what it exposes (/metrics, spans)
- `wire/` vLLM's interface: its OpenAI-compatible routes, bodies and errors
- `twin/` the engine model on a virtual clock: a deployment's twin and its fit to a capture
- `cli.py` `python -m loadgen.sim`: its own flags, then vLLM's
- `fit_cli.py` `python -m loadgen.sim fit`
- `fit_out.py` the fit's outputs, checked before any work
- `fit_cost.py` what a fit costs: bounded before it starts, shown while it runs
"""

"""loadgen.sim: a vLLM-like simulated upstream, for tests, benchmarks and demos without a GPU.

On the wire it speaks vLLM's OpenAI-compatible API; in time it follows either a performance
model of a model on given GPUs driven by a continuous-batching engine (a preset), or fixed
TTFT/ITL figures (an exact test upstream). `python -m loadgen.sim --help`; in-process:
`loadgen.sim.app.create_app`.

- `cli.py` `python -m loadgen.sim`: its own flags, then vLLM's
- `vllm_args.py` vLLM's engine flags, with vLLM's names and meaning
- `presets.py` a model on some hardware, as a TOML file in presets/
- `app.py` vLLM's OpenAI-compatible routes over a simulated engine
- `auth.py` vLLM's --api-key
- `requests.py` a request read as vLLM reads it: parsing and admission
- `validation.py` field validation as vLLM's request models do it
- `responses.py` the bodies and stream chunks vLLM writes
- `errors.py` vLLM's error bodies
- `serving.py` serving flags that change what an answer says
- `middleware.py` where scripts and faults are played
- `script.py` scripted mode: a script per request
- `faults.py` failure injection
- `connection.py` the connection under a request, for the faults that break it
- `fixed.py` fixed timing: an exact test upstream
- `engine.py` the continuous-batching engine in real time
- `clock.py` waiting for a point on the schedule
- `scheduler.py` continuous batching as vLLM's V1 scheduler does it
- `sequence.py` one request inside the engine
- `plan.py` what a request will generate, decided on arrival
- `model.py` the performance model: how long one step takes, and its power
- `gpus.py` the simulated GPUs' busy time, power and energy
- `speculation.py` speculative decoding, reduced to what the timing needs
- `prefix_cache.py` the KV cache's blocks with automatic prefix caching
- `tokenizer.py` the tokenizer and text generator
- `metrics.py` /metrics: vLLM's series and DCGM-like GPU gauges
- `tracing.py` vLLM's llm_request span
- `calibration.py` the model against published measurements, on a virtual clock
- `frontend.py` the API server before the engine: one serial process
- `virtual.py` the engine's steps on a virtual clock, over replicas behind a router
- `twin.py` a deployment's twin: requests in, per-request timings out
- `capture.py` a capture of a deployment's traffic: the proxy's log or a loadgen run
- `fit.py` fitting a preset's efficiency terms to a capture
- `sensitivity.py` how timings move with each term, the schedule held fixed
- `twin_fit.py` a fit from start to verdict: identification, held-out error
- `fit_cli.py` `python -m loadgen.sim fit`
"""

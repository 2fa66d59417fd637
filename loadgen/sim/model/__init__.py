"""The engine model: how long a step of a model on some GPUs takes, which requests a step
holds, and what the KV cache keeps. Pure, no clock, no sockets: the real-time engine and the
twin drive the same code.

- `roofline.py` the performance model: how long one step takes, and its power
- `presets.py` a model on some hardware, as a TOML file in loadgen/sim/presets/
- `catalogue.py` GPUs' datasheet figures and efficiency ceilings (catalogue.toml)
- `keys.py` the data files' keys, each a declared type and range
- `hf_config.py` a model's shape from its Hugging Face config.json
- `derived.py` a preset from a catalogue GPU and a config.json
- `scheduler.py` continuous batching as vLLM's V1 scheduler does it
- `stride.py` the steps of a batch that stays the same, without a pass over every sequence
- `sequence.py` one request inside the engine
- `plan.py` what a request will generate, decided on arrival
- `speculation.py` speculative decoding, reduced to what the timing needs
- `prefix_cache.py` the KV cache's blocks with automatic prefix caching
- `frontend.py` the API server around the engine: one serial process, both ways
- `gpus.py` the simulated GPUs' busy time, power and energy
- `tokenizer.py` the tokenizer and text generator
"""

"""What every layer of the proxy stands on, and loadgen shares: the settings (read by every
layer, as uvicorn's protocols read uvicorn.config), the types and units of their values,
the ASGI interface, the telemetry's names and what this build is. Imports nothing of the
proxy but measure/'s constants.

- `config.py` Settings: flags, environment and config file, validated once
- `setting_types.py` each setting's declared type and range (loadgen's flags share them)
- `units.py` durations and sizes as people write them
- `worker_count.py` how many workers: a count, or auto from the CPUs the process may use
- `asgi.py` the ASGI interface the proxy is written against
- `semconv.py` attribute, span and instrument names (OTel GenAI and HTTP conventions)
- `build.py` the version, which modules are compiled (mypyc), and whether this process runs them so
"""

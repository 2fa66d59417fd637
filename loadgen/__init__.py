"""loadgen: comparative load runs against OpenAI-compatible streaming endpoints.

The top level holds the commands and what they share; each folder below is a layer or a
seam, and imports go down: the commands (and capacity/, plan/, locust/) over shards/, over reports/
and engine/, over analysis/. sim/ stands apart: a server, not a client.

- `cli.py` `python -m loadgen`: flags in, a RunConfig out
- `run.py` a load run from its RunConfig
- `compare.py` `python -m loadgen compare`
- `rebuild.py` `python -m loadgen report`
- `agents.py` `python -m loadgen sessions`: agents' sessions in a proxy capture
- `worker.py` one process of a --workers run
- `locustfile.py` the ready locustfile for `locust -f`
- `config.py` RunConfig: one run as its flags asked for it
- `rundir.py` a run directory on disk
- `extras.py` what a command needs beyond the core install
- `jsonl.py` JSON-lines input read alike everywhere (a leaf every layer may import)
- `drivers/` how a run's load is driven: live servers, or the simulator's twin
- `capacity/` the capacity search
- `plan/` the cheapest deployment that meets the SLOs, over capacity searches
- `locust/` the Locust engine
- `shards/` one run over many processes or machines
- `reports/` what a person reads of each command
- `engine/` drives the load and measures each request
- `replay/` traces read and timed
- `stack/` the processes beside a run
- `analysis/` records in, figures and verdicts out (pure)
- `sim/` a vLLM-like simulated server
"""

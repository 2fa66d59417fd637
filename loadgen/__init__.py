"""loadgen: comparative load runs against OpenAI-compatible streaming endpoints.

Each folder is a layer or a seam, and imports go down this list, never back up: the Locust
engine and commands/ at the top, inputs/ at the bottom, no two folders importing each other.
sim/ stands apart: a server, not a client. The top level holds only the entry points: no
module below imports them.

- `locustfile.py` the ready locustfile for `locust -f`
- `locust/` the Locust engine, and its command `python -m loadgen.locust`
- `commands/` what a person types: `python -m loadgen` and each of its commands
- `drivers/` how a run's load is driven: live servers, or the simulator's twin
- `shards/` one run over many processes or machines
- `stack/` the processes beside a run
- `plan/` a plan's candidates, their bounds and their ranking (pure)
- `reports/` what a person reads of each command
- `capacity/` the capacity search, pure: its levels, verdicts and answer in words
- `runs/` a run as its flags asked for it, and as its directory keeps it
- `engine/` drives the load and measures each request
- `replay/` traces read and timed
- `analysis/` records in, figures and verdicts out (pure)
- `inputs/` JSON lines, flags' numbers and prompt text (leaves every layer may import)
- `sim/` a vLLM-like simulated server
"""

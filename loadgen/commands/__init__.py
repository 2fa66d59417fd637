"""The commands: what a person types, each in the module named for it, over every layer.

`python -m loadgen` (loadgen/__main__.py) reads its flags in cli.py and hands the RunConfig
to the command they name. No layer imports this folder; only the Locust engine's command,
above it, checks its extras with extras.py first, as `python -m loadgen` does.

- `cli.py` `python -m loadgen`: flags in, a RunConfig out, the command they name run
- `run.py` a load run from its RunConfig
- `capacity.py` `python -m loadgen capacity`: probes run, the search driven
- `plan.py` `python -m loadgen plan`: candidates checked, sized in parallel, ranked
- `replicas.py` the fewest replicas of one plan candidate that hold the traffic
- `pools.py` where a plan's candidates are sized: this machine's processes, or a Ray cluster
- `compare.py` `python -m loadgen compare`
- `report.py` `python -m loadgen report`: a run's report made again from its directory
- `sessions.py` `python -m loadgen sessions`: agents' sessions in a proxy capture
- `worker.py` one process of a --workers run
- `extras.py` what a command needs beyond the core install
"""

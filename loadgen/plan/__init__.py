"""The plan command: the cheapest deployment that meets the SLOs for some traffic, each
candidate sized by the capacity search on the simulator's virtual clock.

- `command.py` `python -m loadgen plan`: candidates checked, sized in parallel, ranked
- `space.py` the candidate space: PLAN.toml and the shorthand flags
- `shapes.py` candidates of a model named by its config.json, on catalogue GPUs
- `bounds.py` what a candidate is told without a run: memory, roofline bounds
- `sizing.py` the fewest replicas of one candidate that hold the traffic
- `pools.py` where candidates are sized: this machine's processes, or a Ray cluster
- `basis.py` what a prediction rests on, and how far it may be off
- `advice.py` cost, ranking, the cost–headroom front and the sentence
"""

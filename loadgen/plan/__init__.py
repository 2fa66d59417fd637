"""A plan, pure: the candidates for the cheapest deployment that meets the SLOs for some
traffic, what each is told without a run, and the ranking. The command that sizes each by
capacity searches on the simulator's virtual clock is commands/plan.py (with replicas.py and
pools.py).

- `space.py` the candidate space: PLAN.toml and the shorthand flags
- `shapes.py` candidates of a model named by its config.json, on catalogue GPUs
- `bounds.py` what a candidate is told without a run: memory, roofline bounds
- `basis.py` what a prediction rests on, and how far it may be off
- `advice.py` cost, ranking, the cost–headroom front and the sentence
"""

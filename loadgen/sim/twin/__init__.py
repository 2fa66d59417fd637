"""A deployment's twin: the engine model on a virtual clock, fitted to a capture of the
deployment's traffic. Its API, for loadgen's virtual targets: `run(preset, requests)` gives
each request's predicted timings.

- `deployment.py` a deployment's twin: requests in, per-request timings out
- `cluster.py` the engine's steps on a virtual clock, over replicas behind a router
- `budget.py` what the replicas cost in memory, told before any work starts
- `capture.py` a capture of a deployment's traffic, its sources on one timeline
- `sources/` the files a fit reads: the proxy's log, loadgen runs, other tools' files
- `fit.py` fitting a preset's efficiency terms to a capture
- `fit_targets.py` the figures a fit matches, grouped where a step's timing would blur them
- `sensitivity.py` how timings move with each term, the schedule held fixed
- `verdict.py` a fit from start to verdict: identification, held-out error
- `figures.py` the client's and the server's TTFT and TPOT, and their percentiles
- `front_start.py` where the front end's search starts: the client's gap over the server
- `front_words.py` which front end a capture is fitted with, and why one is not, in words
- `calibration.py` the model against published measurements, on a virtual clock
"""

from loadgen.sim.twin.deployment import Request, Result, Timing, run

__all__ = ["Request", "Result", "Timing", "run"]

"""A ready locustfile: loadgen's workload and measurements under Locust.

    locust -f loadgen/locustfile.py --host http://127.0.0.1:8000 --users 8 --headless -t 1m
    python -m loadgen.locust --host … (the same, without knowing where this file is)

One closed-loop user class: --users N is loadgen's --concurrency N. For paced users, write
your own locustfile with a subclass of LoadgenUser (README, "Running on Locust").
"""

from __future__ import annotations

from loadgen.locust import LoadgenUser


class ClosedLoopUser(LoadgenUser):
    """Sends, reads the whole stream, sends again (Locust's default wait_time, constant(0))."""

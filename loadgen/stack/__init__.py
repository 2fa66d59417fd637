"""The processes beside a run: the embedded simulator and proxy, child processes on loopback,
and the GPU metrics scraped while the load runs.

- `embedded.py` the simulator and the proxy on free loopback ports
- `processes.py` child processes: a free port, a wait until ready, a clean stop
- `gpu_metrics.py` GPU memory and power scraped during a run
"""

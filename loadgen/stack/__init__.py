"""The processes beside a run: the embedded simulator and proxy, child processes on loopback, and
the GPU metrics scraped while the load runs.
"""

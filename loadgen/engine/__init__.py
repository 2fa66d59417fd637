"""The engine: drives a run's load (blocks, schedules, workloads, targets) and measures each
request on the client side. It writes records; analysis/ judges them.
"""

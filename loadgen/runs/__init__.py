"""A run on paper: what its flags asked for, and what its directory keeps. The commands,
drivers, shards and reports all read these; they compose the engine's, the replay's and the
analysis' settings and data, and import nothing above them.

- `config.py` RunConfig: one run as its flags asked for it
- `rundir.py` a run directory on disk
"""

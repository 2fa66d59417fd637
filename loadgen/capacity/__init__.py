"""The capacity command: the highest load at which every SLO holds, per target.

- `command.py` `python -m loadgen capacity`: probes run, the search driven
- `search.py` the search, pure: a probe's size and the next level
- `verdict.py` one probe against the SLOs
- `axis.py` the axis a search's levels are on
- `advice.py` the answer in words
"""

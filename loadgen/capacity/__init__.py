"""The capacity search, pure: the highest load at which every SLO holds, per target. The
command that runs its probes is commands/capacity.py; reports/ writes what it found.

- `search.py` the search, pure: a probe's size and the next level
- `verdict.py` one probe against the SLOs
- `axis.py` the axis a search's levels are on
- `advice.py` the answer in words
"""

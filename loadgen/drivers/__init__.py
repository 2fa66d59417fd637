"""How a run's load is driven: one interface, two drivers, the same run data.

A driver takes the run's config, its trace (when it replays one) and its dataset (when it
has one), and returns the RunData that analysis/ summarises and reports/ writes: the live
driver sends the load to servers over sockets, in real time; the virtual one runs it on the
simulator's twin, on a virtual clock. `driver_for` chooses by the targets, and refuses
before any load what the chosen driver cannot do.

- `live.py` the load sent to servers: the engine's runner, in real time
- `virtual.py` the load on the simulator's twin: predicted timings as records
- `meta.py` what a run was, for its report: its command, targets and environment
"""

from __future__ import annotations

from collections.abc import Callable

from loadgen import replay
from loadgen.analysis.records import RunData
from loadgen.drivers import live, virtual
from loadgen.engine.virtual import is_virtual
from loadgen.inputs.prompt_text import Prompt
from loadgen.runs.config import RunConfig

Drive = Callable[[RunConfig, replay.Replay | None, list[Prompt] | None], RunData]


def driver_for(config: RunConfig) -> Drive:
    """The live driver for servers, the virtual one for `virtual:` targets."""
    if any(is_virtual(spec) for spec in config.targets):
        virtual.refuse(config)
        return virtual.drive
    return live.drive

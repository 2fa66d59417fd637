"""The engine on a virtual clock: the real-time engine's steps (realtime/batching.py) without
sockets or sleeping. Pure, no I/O.

N replicas, each a Scheduler stepping back to back with the preset's performance model and
its own front end (frontend.py: requests pass it on the way in, each step's tokens on the
way out), behind a router that sends each request to the replica with the fewest requests
outstanding (the lowest index on a tie), as a least-loaded router does. Events run in time
order; at one instant arrivals and hand-offs come before a replica's next step, so a
request arriving when a step ends joins the next one, as it would in real time. A replica's
wake-up and step end go on the calendar only when something else is due before them; a
lone replica between arrivals steps straight on, in the order the calendar would have run.
calibration.py's replays and deployment.py's runs are this loop.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from loadgen.sim.model.frontend import Frontend
from loadgen.sim.model.presets import Preset
from loadgen.sim.model.roofline import StepTime
from loadgen.sim.model.scheduler import Batch, Scheduler
from loadgen.sim.model.sequence import Seq

# told of each finished request and the time; returns the requests that waited on it, their
# arrivals set
FollowUp = Callable[[Seq, float], Iterable[Seq]]
# told of each step as it ends: replica, the step's work, its time, the end, what it sampled
Sampled = list[tuple[Seq, float | None]]  # a step's sequences that sampled, with their gap
Observer = Callable[[int, Batch, StepTime, float, Sampled], None]

_ARRIVE, _ENTER, _WAKE, _END = range(4)  # event kinds, in the order one instant runs them


@dataclass(slots=True)
class Replica:
    """One engine: its scheduler, its front end, the step in flight."""

    scheduler: Scheduler
    frontend: Frontend
    outstanding: int = 0  # requests routed here and not finished (the router's count)
    batch: Batch | None = None  # the step in flight
    step: StepTime | None = None  # and its time
    awake: bool = False  # a step or a wake-up is on the calendar


@dataclass(slots=True)
class Cluster:
    """Replicas of one preset and the calendar of what happens next."""

    preset: Preset
    replicas: list[Replica]
    clock: float = 0.0
    steps: int = 0
    _calendar: list[tuple[float, int, int, int, Seq | None]] = field(default_factory=list)
    _order: int = 0

    @classmethod
    def of(cls, preset: Preset, replicas: int = 1, seed: int = 0) -> Cluster:
        if replicas < 1:
            raise ValueError(f"replicas must be ≥ 1, not {replicas}")
        engines = [
            Replica(
                Scheduler(preset.engine, preset.kv_capacity_tokens, seed + i),
                Frontend(preset.perf.efficiency),
            )
            for i in range(replicas)
        ]
        return cls(preset, engines)

    def submit(self, seq: Seq) -> None:
        """A request reaching the router at seq.arrival."""
        self._push(seq.arrival, _ARRIVE, -1, seq)

    def run(self, follow_up: FollowUp | None = None, observe: Observer | None = None) -> float:
        """Every submitted request to the end; returns the virtual time the last step ended.
        A request's `arrival` becomes the time its replica's engine received it (after the
        front end, when the preset has one); its tokens are sent (Seq.sent) once the front
        end has done their step's output work, and a follow-up is told of a finished
        request then: when its client had the last token."""
        calendar = self._calendar
        while calendar:
            now, kind, index, _, seq = heapq.heappop(calendar)
            self.clock = now
            if kind == _ARRIVE:
                assert seq is not None
                index = min(range(len(self.replicas)), key=self._load)
                replica = self.replicas[index]
                replica.outstanding += 1
                seq.arrival = replica.frontend.admit(now, seq.prompt_tokens)
                self._push(seq.arrival, _ENTER, index, seq)
                continue
            replica = self.replicas[index]
            if kind == _ENTER:
                assert seq is not None
                replica.scheduler.add(seq)
                if not replica.awake:
                    replica.awake = True
                    self._push(now, _WAKE, index)
            elif kind == _WAKE or self._ended(index, now, follow_up, observe):
                self._step_on(index, now, follow_up, observe)  # woken, or its step left work
        return self.clock

    def _step_on(
        self, index: int, now: float, follow_up: FollowUp | None, observe: Observer | None
    ) -> None:
        """The replica's steps from `now`. Its wake-up and each step's end are filed only
        when an entry of the calendar sorts before them (by time, kind and replica; a
        replica has at most one of either filed at once, by its `awake` flag); otherwise the
        calendar would pop them next, so they run at once, in the same order."""
        replica, calendar = self.replicas[index], self._calendar
        while True:
            if calendar and calendar[0] < (now, _WAKE, index):
                self._push(now, _WAKE, index)
                return
            batch = replica.scheduler.schedule(now)
            if not batch.work:  # cannot happen while max_model_len fits in the cache
                raise RuntimeError("scheduler made no progress")
            step = batch.step(self.preset.perf)
            replica.batch, replica.step = batch, step
            now += step.total
            if calendar and calendar[0] < (now, _END, index):
                self._push(now, _END, index)
                return
            self.clock = now
            if not self._ended(index, now, follow_up, observe):
                return

    def _ended(
        self, index: int, now: float, follow_up: FollowUp | None, observe: Observer | None
    ) -> bool:
        """The replica's step in flight ended at `now`: applied, observed, its finished
        requests' follow-ups submitted. Whether the replica has more to do."""
        replica = self.replicas[index]
        assert replica.batch is not None and replica.step is not None
        batch, step = replica.batch, replica.step
        self.steps += 1
        sampled = replica.scheduler.complete(batch, now)
        sent = replica.frontend.send(now, sampled)
        if observe is not None:
            observe(index, batch, step, now, sampled)
        for done, _gap in sampled:
            if not done.finished:
                continue
            replica.outstanding -= 1
            for nxt in follow_up(done, sent) if follow_up is not None else ():
                self.submit(nxt)
        if replica.scheduler.idle:
            replica.awake = False
            return False
        return True

    def _load(self, index: int) -> int:
        return self.replicas[index].outstanding

    def _push(self, at: float, kind: int, index: int, seq: Seq | None = None) -> None:
        self._order += 1
        heapq.heappush(self._calendar, (at, kind, index, self._order, seq))


def replay(
    preset: Preset,
    seqs: Iterable[Seq],
    follow_up: FollowUp | None = None,
    observe: Observer | None = None,
    replicas: int = 1,
    seed: int = 0,
) -> float:
    """Run `seqs` (arrival times set) to the end; the virtual time the last step ended."""
    cluster = Cluster.of(preset, replicas, seed)
    for seq in seqs:
        cluster.submit(seq)
    return cluster.run(follow_up, observe)

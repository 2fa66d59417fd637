"""A worker's metric values in a file in shared memory, written as they change and read by
the supervisor, so what a worker counted outlives it (a SIGKILL loses nothing).

The file is a header (bytes used) and then one record per label set, appended on first
use: key, creation time, the values as doubles (a histogram's bucket counts then its sum;
a counter's or gauge's one value) and, for a histogram, one exemplar slot per bucket
(value, time, trace id). A record is written whole before the header counts it, so a
reader never sees half of one; a value is one aligned 8-byte store.
"""

from __future__ import annotations

import mmap
import os
import struct
import time
from bisect import bisect_left
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import orjson
from prometheus_client.samples import Exemplar

from latency_proxy.telemetry.histogram import Series, with_inf

SIZE = 64 * 2**20  # sparse: only the pages written take memory
_HEAD = struct.Struct("<Q")  # bytes used
_RECORD = struct.Struct("<IIdII")  # record length, key length, created, values, exemplars
_EXEMPLAR = struct.Struct("<dd16s")  # value, time, trace id
_ALIGN = 8


class StoreFull(Exception):
    """No room for another label set: its values are not shared (the store logs it)."""


def _padded(n: int) -> int:
    return -(-n // _ALIGN) * _ALIGN


class Store:
    """One worker's file, open for writing."""

    def __init__(self, path: Path) -> None:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, SIZE)
            self._map = mmap.mmap(fd, SIZE)
        finally:
            os.close(fd)
        self._used = _HEAD.size
        _HEAD.pack_into(self._map, 0, self._used)

    def allocate(self, name: str, labels: Sequence[str], values: int, exemplars: int) -> int:
        """Room for one label set's values; returns their offset."""
        key = orjson.dumps([name, list(labels)])
        start = self._used
        values_at = start + _RECORD.size + _padded(len(key))
        end = values_at + 8 * values + _EXEMPLAR.size * exemplars
        if end > SIZE:
            raise StoreFull(name)
        _RECORD.pack_into(self._map, start, end - start, len(key), time.time(), values, exemplars)
        self._map[start + _RECORD.size : start + _RECORD.size + len(key)] = key
        self._used = end
        _HEAD.pack_into(self._map, 0, end)  # the record is complete: count it
        return values_at

    def doubles(self, offset: int, count: int) -> memoryview[float]:
        return memoryview(self._map)[offset : offset + 8 * count].cast("d")

    def write_exemplar(self, offset: int, value: float, at: float, trace_id: str) -> None:
        _EXEMPLAR.pack_into(self._map, offset, value, at, bytes.fromhex(trace_id))


class SharedSeries(Series):
    """A histogram label set whose counts and sum live in a store (the worker's side)."""

    __slots__ = ("_cells", "_exemplars_at", "_store")

    def __init__(self, bounds: tuple[float, ...], store: Store, name: str, labels: Sequence[str]):
        super().__init__(bounds)
        offset = store.allocate(name, labels, len(bounds) + 1, len(bounds))
        self._store = store
        self._cells = store.doubles(offset, len(bounds) + 1)
        self._exemplars_at = offset + 8 * (len(bounds) + 1)
        self.counts = self._cells[: len(bounds)]  # type: ignore[assignment]  # a view, used as the list

    def observe(self, values: Sequence[float], trace_id: str | None = None) -> None:
        self.sum = self._cells[-1]
        super().observe(values, trace_id)
        self._cells[-1] = self.sum
        if trace_id is not None and values:
            top = max(values)
            if top == top:
                bucket = bisect_left(self.bounds, top)
                exemplar = self.exemplars[bucket]
                assert exemplar is not None
                self._store.write_exemplar(
                    self._exemplars_at + _EXEMPLAR.size * bucket,
                    top,
                    cast(float, exemplar.timestamp),  # Series.observe stamps time.time()
                    trace_id,
                )


class SharedValue:
    """A counter's or gauge's label set whose value lives in a store."""

    __slots__ = ("_cell",)

    def __init__(self, store: Store, name: str, labels: Sequence[str]) -> None:
        self._cell = store.doubles(store.allocate(name, labels, 1, 0), 1)

    def inc(self, amount: float = 1.0) -> None:
        self._cell[0] += amount


class SharedFamily:
    """An instrument's label sets in a store, in place of its Prometheus collector (a
    worker serves no /metrics of its own): `labels` gives what the collector's would."""

    def __init__(
        self, name: str, kind: str, bounds: tuple[float, ...], labelled: bool, store: Store
    ) -> None:
        self._name = name
        self._histogram = kind == "histogram"
        self._bounds = with_inf(bounds)
        self._store = store
        self._children: dict[tuple[str, ...], SharedSeries | SharedValue] = {}
        if not labelled:  # there from the start, as in a collector without labels
            self.labels()

    def labels(self, *values: str) -> SharedSeries | SharedValue:
        child = self._children.get(values)
        if child is None:
            if self._histogram:
                child = SharedSeries(self._bounds, self._store, self._name, values)
            else:
                child = SharedValue(self._store, self._name, values)
            self._children[values] = child
        return child


@dataclass(slots=True)
class Read:
    """One label set as a store holds it."""

    name: str
    labels: tuple[str, ...]
    created: float
    values: list[float]
    exemplars: list[Exemplar | None]


def records(fd: int) -> list[Read]:
    """Every complete record of the store open on `fd`, read through a mapping of only the
    part in use, held only while reading: a reader of many stores (many workers, or one
    restarted many times) keeps no store's size of address space between reads."""
    (used,) = _HEAD.unpack(os.pread(fd, _HEAD.size, 0))
    with mmap.mmap(fd, used, access=mmap.ACCESS_READ) as data:
        return list(read(data))


def read(data: mmap.mmap) -> Iterator[Read]:
    """Every complete record of a store, or of the part of it `data` maps."""
    used = min(_HEAD.unpack_from(data, 0)[0], len(data))  # what its writer added since: not mapped
    at = _HEAD.size
    while at < used:
        length, key_length, created, values, exemplars = _RECORD.unpack_from(data, at)
        key_at = at + _RECORD.size
        name, labels = orjson.loads(data[key_at : key_at + key_length])
        values_at = key_at + _padded(key_length)
        numbers = list(struct.unpack_from(f"<{values}d", data, values_at))
        slots = [
            _EXEMPLAR.unpack_from(data, values_at + 8 * values + _EXEMPLAR.size * i)
            for i in range(exemplars)
        ]
        yield Read(
            name,
            tuple(labels),
            created,
            numbers,
            [
                Exemplar({"trace_id": tid.hex()}, value, when) if when else None
                for value, when, tid in slots
            ],
        )
        at += length

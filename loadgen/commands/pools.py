"""Where a plan's candidates are sized: this machine's processes (`--jobs`), or a Ray cluster
(`--ray ADDRESS`, the optional `ray` extra).

On Ray each candidate is one task, run on whichever node has a CPU free, in a scratch
directory there; the task hands back its sizing and its directory's files, which are
written where a local search would have put them, and the paths in its sizing are those.
So plan.json and `candidates/*/` read the same either way, and a candidate's figure is the
capacity command's typed by hand on this machine.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import io
import json
import multiprocessing
import socket
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from loadgen.commands.replicas import Job, size

Sized = dict[str, Any]
Submit = Callable[[Job], "concurrent.futures.Future[Sized]"]
LOCAL = "local"  # --ray local: a cluster of this machine alone, started for the plan
REACH_S = 5.0  # how long a cluster's address may take to accept a connection


@dataclasses.dataclass(frozen=True, slots=True)
class Pool:
    submit: Submit
    slots: int  # candidates sized at once
    where: str  # for the console: "2 processes", "16 CPUs of the Ray cluster at …"


@contextlib.contextmanager
def processes(jobs: int) -> Iterator[Pool]:
    """`jobs` processes of this machine, forked so each starts with the plan's imports."""
    context = multiprocessing.get_context("fork")
    with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=context) as executor:
        yield Pool(lambda job: executor.submit(size, job), jobs, f"{jobs} processes")


@contextlib.contextmanager
def ray_cluster(address: str, jobs: int | None) -> Iterator[Pool]:
    """The Ray cluster at `address` (or, for `local`, one started on this machine); as many
    candidates at once as `jobs`, else as the cluster has CPUs. ValueError when Ray is not
    installed or the cluster cannot be joined."""
    _reachable(address)
    try:
        import ray
    except ImportError:
        raise ValueError("--ray needs Ray: pip install 'latency-proxy[ray]'") from None
    try:
        ray.init(
            address=None if address == LOCAL else address,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
        )
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise ValueError(f"--ray {address}: cannot join the cluster ({exc})") from None
    try:
        cpus = int(ray.cluster_resources().get("CPU", 1))
        remote = ray.remote(num_cpus=1)(_sized_in_scratch)

        def submit(job: Job) -> concurrent.futures.Future[Sized]:
            done: concurrent.futures.Future[Sized] = concurrent.futures.Future()

            def unpack(ran: concurrent.futures.Future[tuple[Sized, bytes]]) -> None:
                try:
                    sized, files = ran.result()
                    _unpack(files, job.out)
                    done.set_result(sized)
                except BaseException as exc:  # the task's own error, raised by result()
                    done.set_exception(exc)

            remote.remote(job).future().add_done_callback(unpack)
            return done

        where = "this machine's Ray" if address == LOCAL else f"the Ray cluster at {address}"
        yield Pool(submit, jobs or cpus, f"{cpus} CPUs of {where}")
    finally:
        ray.shutdown()


def _reachable(address: str) -> None:
    """ValueError unless a cluster's HOST:PORT answers within REACH_S: Ray itself retries an
    address that does not answer for minutes."""
    if address in (LOCAL, "auto"):
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"--ray {address}: expected HOST:PORT, ray://HOST:PORT, auto or local")
    try:
        socket.create_connection((host.strip("[]"), int(port)), REACH_S).close()
    except OSError as exc:
        raise ValueError(f"--ray {address}: no answer ({exc.strerror or exc})") from None


def _sized_in_scratch(job: Job) -> tuple[Sized, bytes]:
    """On a Ray worker: the candidate sized in a scratch directory, its sizing with the
    directory's paths put back to the plan's, and the directory's files, packed."""
    with tempfile.TemporaryDirectory(prefix="loadgen-plan-") as scratch:
        here = Path(scratch) / job.out.name
        sized = size(dataclasses.replace(job, out=here))
        packed = io.BytesIO()
        with tarfile.open(fileobj=packed, mode="w:gz") as tar:
            tar.add(here, arcname=".")
    moved = json.dumps(sized).replace(json.dumps(str(here))[1:-1], json.dumps(str(job.out))[1:-1])
    return json.loads(moved), packed.getvalue()


def _unpack(files: bytes, out: Path) -> None:
    """A candidate's files where a local search writes them; nothing outside `out`."""
    out.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(files), mode="r:gz") as tar:
        tar.extractall(out, filter="data")

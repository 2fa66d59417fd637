"""The proxy as the recorder: its request log lines, replayed, give back the arrivals and
lengths of the traffic it saw; with --content-capture hash their per-message prefix hashes
say which requests shared a conversation prefix, and no prompt text is in the log."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadgen.analysis.records import UNFINISHED
from loadgen.commands.cli import main
from loadgen.runs import rundir
from loadgen.stack.processes import simulator
from tests.loadgen.replay.test_replay import on_schedule
from tests.support.proxy import ProxyProcess, proxy_env

SYSTEM = "You answer questions about canary-7f3a water towers"
TURNS = [
    [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "how tall is one"}],
    [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "what holds the water"}],
    [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "how tall is one"},
        {"role": "assistant", "content": "about forty metres"},
        {"role": "user", "content": "and the widest"},
    ],
]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, ProxyProcess]]:
    logs = tmp_path_factory.mktemp("proxy") / "proxy.log"
    with simulator("--preset", "llama-70b-bf16-tp4-a100") as sim:
        env = proxy_env(None, LATENCY_PROXY_CONTENT_HASH_KEY="replay-test-key")
        args = ["--upstream", sim, "--content-capture", "hash", "--log-format", "json"]
        proxy = ProxyProcess(args, env, logs).wait_ready()
        try:
            yield sim, proxy
        finally:
            proxy.stop()


def test_a_capture_replays_to_the_same_arrivals_and_lengths(
    stack: tuple[str, ProxyProcess], tmp_path: Path
) -> None:
    sim, proxy = stack
    dataset = tmp_path / "chats.jsonl"
    dataset.write_text(
        "".join(
            json.dumps({"messages": m, "max_tokens": 3 + i}) + "\n" for i, m in enumerate(TURNS)
        )
    )
    argv = ["--target", proxy.url, "--rate", "8", "--requests", "15", "--warmup", "0s"]
    assert (
        main([*argv, "--dataset", str(dataset), "--out", str(tmp_path / "a"), "--no-progress"]) == 0
    )
    recorded = rundir.read(tmp_path / "a")
    ids = {r.request_id for r in recorded.records}
    capture = tmp_path / "capture.jsonl"
    lines = logged(proxy, ids)
    capture.write_text("\n".join(lines) + "\n")
    assert "canary-7f3a" not in proxy.output()  # hashes, never text

    argv = [
        "--target",
        sim,
        "--replay",
        str(capture),
        "--out",
        str(tmp_path / "b"),
        "--no-progress",
    ]
    assert main(argv) == 0
    replayed = rundir.read(tmp_path / "b")
    assert replayed.meta["replay"]["format"] == "proxy"
    by_line = {n: json.loads(line) for n, line in enumerate(capture.read_text().splitlines(), 1)}
    original = {r.request_id: r for r in recorded.records}
    pairs = [(original[by_line[r.replay_index]["request_id"]], r) for r in replayed.records]
    # every request, once; but one the client cut at its block's end, whose answer was never
    # finished: the log has no output length to replay it with
    cut = {r.request_id for r in recorded.records if r.error == UNFINISHED}
    assert {a.request_id for a, _ in pairs} == ids - cut
    on_schedule(replayed.records)
    first_a = min(a.sent_at for a, _ in pairs)
    first_b = min(b.intended_at for _, b in pairs)
    first_seen = min(by_line[b.replay_index]["arrived_at"] for _, b in pairs)
    for a, b in pairs:
        assert (b.input_tokens, b.output_tokens) == (a.input_tokens, a.output_tokens)
        seen = by_line[b.replay_index]["arrived_at"] - first_seen
        assert b.intended_at - first_b == pytest.approx(seen, abs=1e-5)  # the proxy's clock
        # which is the client's, to within a connection's setup on a busy machine
        assert seen == pytest.approx(a.sent_at - first_a, abs=0.05)


def test_prefix_hashes_follow_the_conversation(
    stack: tuple[str, ProxyProcess], tmp_path: Path
) -> None:
    _, proxy = stack
    dataset = tmp_path / "chats.jsonl"
    dataset.write_text("".join(json.dumps({"messages": m}) + "\n" for m in TURNS))
    argv = [
        "--target",
        proxy.url,
        "--rate",
        "20",
        "--requests",
        "12",
        "--warmup",
        "0s",
        "--seed",
        "1",
    ]
    assert (
        main(
            [
                *argv,
                "--output-tokens",
                "2",
                "--dataset",
                str(dataset),
                "--out",
                str(tmp_path / "a"),
                "--no-progress",
            ]
        )
        == 0
    )
    ids = {r.request_id for r in rundir.read(tmp_path / "a").records}
    lines = [
        line
        for line in proxy.log_lines()
        if line.get("request_id") in ids and line.get("msg") == "request"
    ]
    hashes = {tuple(line["prefix_hashes"]) for line in lines}
    assert {len(h) for h in hashes} <= {2, 4}
    by_length = {len(h): h for h in hashes}
    two = [h for h in hashes if len(h) == 2]
    assert len({h[0] for h in hashes}) == 1  # one system message, one first hash
    assert len({h[1] for h in two}) == len(two)  # different questions part ways there
    if 4 in by_length:  # the follow-up shares the first turn's whole prefix
        assert by_length[4][:2] in two
    for line in lines:
        assert isinstance(line["arrived_at"], float) and line["model"] == "llama-70b"


def logged(proxy: ProxyProcess, ids: set[str]) -> list[str]:
    """The proxy's request lines once every id has one: a request the client cut at its
    block's end is logged a moment after the run returns."""
    deadline = time.monotonic() + 10
    while True:
        lines = [line for line in proxy.output().splitlines() if '"msg":"request"' in line]
        if ids <= {json.loads(line).get("request_id") for line in lines}:
            return lines
        assert time.monotonic() < deadline, "a recorded request never reached the proxy's log"
        time.sleep(0.05)

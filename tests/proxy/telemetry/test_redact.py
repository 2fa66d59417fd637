"""Detectors and the content policy, as pure functions."""

from __future__ import annotations

import hashlib
import hmac
import json
import random
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from latency_proxy.telemetry.redact import (
    FULL,
    HASH,
    OFF,
    REDACTED,
    ContentPolicy,
    load_audit_hook,
    prc_resident_id_ok,
    request_texts,
    scrub,
)

SECRETS = {
    "email": ["jane.doe+llm@example.co.uk", "ops@corp-mail.example.com"],
    "phone": ["+1 415-555-0100", "+86 138 0013 8000", "(020) 7946 0958"],
    "ipv4": ["192.168.10.254", "8.8.8.8"],
    "ipv6": ["2001:db8::8a2e:370:7334", "fe80::1ff:fe23:4567:890a"],
    "card_number": ["4111 1111 1111 1111", "5500-0000-0000-0004", "378282246310005"],
    "api_key": [
        "sk-proj-abcdefghijklmnop1234567890",
        "AKIAIOSFODNN7EXAMPLE",
        "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
        "hf_abcdefghijklmnopqrstuvwxyz0123456",
    ],
    "bearer_token": ["Bearer abc123def456ghi789"],
    "jwt": ["eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.dBjftJeZ4CVPmB92K27uhbUJU1p1r_wW1gFWFOEjXk"],
    "prc_resident_id": ["11010519491231002X", "440524188001010014"],
    "us_ssn": ["123-45-6789"],
}
ALL = [(kind, value) for kind, values in SECRETS.items() for value in values]
SAFE = [
    "The year 2024 had 365 days.",
    "Pi is 3.14159 and e is 2.71828.",
    "Version 1.2.3 shipped.",
    "Order 12345 of 67890 items",
    "Use ratio 16:9 at 10:30 today",
    "a.b and c@d are not mail",
]


@pytest.mark.parametrize(("kind", "secret"), ALL)
def test_each_secret_is_detected_in_context(kind: str, secret: str) -> None:
    text = f"Please remember {secret}, thanks."
    out = scrub(text)
    assert secret not in out
    assert out.startswith("Please remember [REDACTED:") and out.endswith(", thanks.")


@pytest.mark.parametrize("times", [2, 3])
def test_addresses_run_together_are_each_caught(times: int) -> None:
    """A stream's tokens joined without a space: no address hides the next one."""
    address = "canary0123456789@example.com"
    assert address not in scrub(address * times)


def test_leading_dots_of_an_address_are_kept() -> None:
    assert scrub("mail ...jane@example.com now") == "mail ...[REDACTED:email] now"


@pytest.mark.parametrize("unit", ["a.", "x@a.", ".a", "a@", "1.", "1-", "a:", "1 "])
def test_no_text_makes_the_scan_run_away(unit: str) -> None:
    """Each detector is linear: 400 KB of one hostile pattern takes well under a second
    here (a local part retried at every word of "a.a.a…" took minutes)."""
    text = unit * (200_000 // len(unit))
    started = time.process_time()
    scrub(text)
    assert time.process_time() - started < 5.0


@pytest.mark.parametrize("text", SAFE)
def test_ordinary_text_and_numbers_survive(text: str) -> None:
    assert scrub(text) == text


@settings(max_examples=200)
@given(
    st.lists(st.sampled_from(ALL), min_size=1, max_size=4),
    st.lists(
        st.text(alphabet=st.characters(categories=["L", "Zs"]), max_size=20), min_size=5, max_size=5
    ),
)
def test_secrets_in_random_prose_never_survive(secrets: list, prose: list[str]) -> None:
    parts = []
    used = [*prose[: len(secrets)], prose[-1]]
    for i, (_, secret) in enumerate(secrets):
        parts += [prose[i], " ", secret, " "]
    text = "".join(parts) + prose[-1]
    out = scrub(text)
    for _, secret in secrets:
        assert secret not in out
    for word in " ".join(used).split():
        assert word in out  # the rest of the text stays


def test_luhn_and_check_digits_decide() -> None:
    assert scrub("card 4111 1111 1111 1112 here") == "card 4111 1111 1111 1112 here"
    assert prc_resident_id_ok("11010519491231002X")
    assert not prc_resident_id_ok("110105194912310021")
    digits = "".join(random.Random(1).choice("0123456789") for _ in range(17))
    good = [digits + c for c in "0123456789X" if prc_resident_id_ok(digits + c)]
    assert len(good) == 1


def test_user_patterns_and_audit_hook() -> None:
    policy = ContentPolicy(
        "redacted",
        patterns=[r"PROJECT-\d+"],
        audit_hook=lambda t: None if "drop me" in t else t.upper(),
    )
    assert (
        policy.apply("see PROJECT-42 and mail a@b.example")
        == "SEE [REDACTED:CUSTOM] AND MAIL [REDACTED:EMAIL]"
    )
    assert policy.apply("please drop me") is None


def test_broken_audit_hook_drops_the_text_not_the_request() -> None:
    def broken(text: str) -> str:
        raise RuntimeError(text)

    assert ContentPolicy("redacted", audit_hook=broken).apply("x") is None


def test_hash_is_a_keyed_hmac_and_needs_a_key() -> None:
    policy = ContentPolicy("hash", hash_key=b"k1")
    expected = hmac.new(b"k1", b"hello", hashlib.sha256).hexdigest()
    assert policy.apply("hello") == "hmac-sha256:" + expected
    assert ContentPolicy("hash", hash_key=b"k2").apply("hello") != policy.apply("hello")
    with pytest.raises(ValueError, match="needs a key"):
        ContentPolicy("hash")


def test_off_records_nothing_full_records_all_with_a_cap() -> None:
    assert ContentPolicy("off").apply("secret") is None
    assert ContentPolicy("off").messages([("user", "secret")]) is None
    full = ContentPolicy("full", max_chars=5)
    assert full.apply("abcdefgh") == "abcde…[truncated]"
    assert full.messages([("user", "hi")], "stop") == [
        {"role": "user", "parts": [{"type": "text", "content": "hi"}], "finish_reason": "stop"}
    ]


def test_request_texts_of_chat_and_completions() -> None:
    chat = {
        "messages": [
            {"role": "system", "content": "s"},
            {"role": "user", "content": [{"type": "text", "text": "u"}, {"type": "image_url"}]},
        ]
    }
    assert request_texts(chat) == [("system", "s"), ("user", "u")]
    assert request_texts({"prompt": ["a", "b"]}) == [("user", "a"), ("user", "b")]
    assert request_texts(json.loads('"x"')) == []


def test_audit_hook_loading_errors_are_clear() -> None:
    assert load_audit_hook("json:dumps") is json.dumps
    for bad in ["nomodule", "no_such_module_x:f", "json:no_such_attr", "json:__doc__"]:
        with pytest.raises(ValueError, match="--audit-hook"):
            load_audit_hook(bad)


def test_prefix_hashes_are_keyed_chained_and_only_in_hash_mode() -> None:
    policy = ContentPolicy(HASH, hash_key=b"k1")
    turn1 = policy.prefix_hashes([("system", "be brief"), ("user", "hi")])
    turn2 = policy.prefix_hashes([("system", "be brief"), ("user", "hi"), ("assistant", "yo")])
    other = policy.prefix_hashes([("system", "be brief"), ("user", "hello")])
    assert turn2[:2] == turn1 and len(turn2) == 3  # a conversation extends its prefix
    assert other[0] == turn1[0] and other[1] != turn1[1]
    assert all(len(h) == 32 for h in turn2)
    # boundaries and roles count: the same characters split or attributed differently differ
    assert (
        policy.prefix_hashes([("user", "ab"), ("user", "c")])[1]
        != policy.prefix_hashes([("user", "a"), ("user", "bc")])[1]
    )
    assert policy.prefix_hashes([("user", "x")]) != policy.prefix_hashes([("system", "x")])
    assert ContentPolicy(HASH, hash_key=b"k2").prefix_hashes([("system", "be brief")]) != turn1[:1]
    for mode in (OFF, REDACTED, FULL):
        assert ContentPolicy(mode).prefix_hashes([("user", "hi")]) is None

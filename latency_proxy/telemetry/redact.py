"""The content policy: what, if anything, of prompts and completions is recorded.

off       nothing: only lengths, token counts and ids (the default)
hash      a keyed HMAC-SHA256 of each text part, to correlate identical prompts
redacted  the text after built-in detectors, user regexes and an optional audit hook
full      the raw text (explicit opt-in, warned about at start)

The detectors are pure functions over text; everything that records content asks the
policy first, so no sink has its own idea of what is safe.
"""

from __future__ import annotations

import hashlib
import hmac
import importlib
import ipaddress
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from latency_proxy.base.config import CONTENT_CAPTURE_MODES, ConfigError, Settings, secret_key

OFF, HASH, REDACTED, FULL = CONTENT_CAPTURE_MODES

AuditHook = Callable[[str], str | None]


def _luhn_ok(digits: str) -> bool:
    total = 0
    for i, char in enumerate(reversed(digits)):
        d = ord(char) - 48
        if i % 2:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


_PRC_WEIGHTS = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)
_PRC_CHECK = "10X98765432"


def prc_resident_id_ok(text: str) -> bool:
    """GB 11643-1999: 17 digits and a mod-11 check character (0-9 or X)."""
    if len(text) != 18 or not text[:17].isdigit():
        return False
    total = sum(int(c) * w for c, w in zip(text[:17], _PRC_WEIGHTS, strict=True))
    return _PRC_CHECK[total % 11] == text[17].upper()


def _ipv6_ok(text: str) -> bool:
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


@dataclass(frozen=True, slots=True)
class Detector:
    name: str
    pattern: re.Pattern[str]
    check: Callable[[str], bool] | None = None  # validates a candidate match


DETECTORS: tuple[Detector, ...] = (
    Detector("jwt", re.compile(r"\beyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*")),
    Detector("bearer_token", re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]{8,}")),
    Detector(
        "api_key",
        re.compile(
            r"\b(?:sk-(?:proj-|ant-)?[A-Za-z0-9_-]{16,}|AKIA[0-9A-Z]{16}|ASIA[0-9A-Z]{16}"
            r"|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}|xox[abposr]-[A-Za-z0-9-]{10,}"
            r"|AIza[0-9A-Za-z_-]{35}|hf_[A-Za-z0-9]{30,})"
        ),
    ),
    Detector(
        "email",
        # A local part is tried once per run of its characters, taken whole (possessive):
        # tried at each word inside "a.a.a…" it made the scan quadratic. Leading dots and
        # signs of the run are kept. No boundary after the last label: addresses run
        # together ("a@x.comb@y.com", a stream's tokens joined) must not hide one another.
        re.compile(
            r"(?<![A-Za-z0-9._%+-])(?P<keep>[._%+-]*+)[A-Za-z0-9._%+-]++"
            r"@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z][A-Za-z0-9-]+"
        ),
    ),
    Detector(
        "prc_resident_id", re.compile(r"(?<!\d)\d{17}[\dXx](?![\dA-Za-z])"), prc_resident_id_ok
    ),
    Detector(
        "card_number",
        re.compile(r"(?<!\d)(?:\d[ -]?){12,18}\d(?!\d)"),
        lambda m: _luhn_ok(re.sub(r"[ -]", "", m)),
    ),
    Detector(
        "us_ssn", re.compile(r"(?<!\d)(?!000|666|9\d\d)\d{3}-(?!00)\d{2}-(?!0000)\d{4}(?!\d)")
    ),
    Detector(
        "ipv6",
        re.compile(r"(?<![\w:])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?![\w:])"),
        _ipv6_ok,
    ),
    Detector(
        "ipv4",
        re.compile(
            r"(?<![\d.])(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
            r"(?![\d.])"
        ),
    ),
    Detector(
        "phone",
        re.compile(
            r"(?<![\w+(])(?:\+?\d{1,3}[ .-]?)?(?:\(\d{1,4}\)[ .-]?)?\d{2,4}"
            r"(?:[ .-]?\d{2,4}){1,3}(?!\w)"
        ),
        lambda m: 9 <= sum(c.isdigit() for c in m) <= 15,
    ),
)


def scrub(text: str, extra: Sequence[re.Pattern[str]] = ()) -> str:
    """Replace every detected secret with [REDACTED:<kind>]."""
    for detector in DETECTORS:
        check = detector.check

        def replace(
            match: re.Match[str],
            name: str = detector.name,
            check: Callable[[str], bool] | None = check,
        ) -> str:
            if check is not None and not check(match.group()):
                return match.group()
            kept = match.groupdict().get("keep") or ""  # text the match needs but is not secret
            return f"{kept}[REDACTED:{name}]"

        text = detector.pattern.sub(replace, text)
    for pattern in extra:
        text = pattern.sub("[REDACTED:custom]", text)
    return text


def load_audit_hook(spec: str) -> AuditHook:
    """'module:function' -> the function; it gets text and returns text to record or None."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"--audit-hook {spec!r}: expected module:function")
    try:
        hook = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"--audit-hook {spec!r}: cannot load ({type(exc).__name__})") from None
    if not callable(hook):
        raise ValueError(f"--audit-hook {spec!r}: not callable")
    return hook


class ContentPolicy:
    """Decides what a text becomes before any sink sees it (None: record nothing)."""

    def __init__(
        self,
        mode: str = OFF,
        *,
        hash_key: bytes | None = None,
        patterns: Iterable[str] = (),
        audit_hook: AuditHook | None = None,
        max_chars: int = 8192,
    ) -> None:
        if mode not in CONTENT_CAPTURE_MODES:
            modes = ", ".join(CONTENT_CAPTURE_MODES)
            raise ValueError(f"--content-capture {mode!r}: choose one of {modes}")
        if mode == HASH and not hash_key:
            raise ValueError(
                "--content-capture hash needs a key: set --content-hash-key-file "
                "or LATENCY_PROXY_CONTENT_HASH_KEY"
            )
        self.mode = mode
        self._key = hash_key or b""
        self._patterns = tuple(re.compile(p) for p in patterns)
        self._hook = audit_hook
        self._max_chars = max_chars

    @property
    def captures(self) -> bool:
        return self.mode != OFF

    def apply(self, text: str) -> str | None:
        if self.mode == OFF:
            return None
        if self.mode == HASH:
            digest = hmac.new(self._key, text.encode("utf-8", "surrogatepass"), hashlib.sha256)
            return "hmac-sha256:" + digest.hexdigest()
        if self.mode == REDACTED:
            text = scrub(text, self._patterns)
            if self._hook is not None:
                try:
                    hooked = self._hook(text)
                except Exception:  # a broken hook drops the text, never the request
                    return None
                if hooked is None:
                    return None
                text = str(hooked)
        if len(text) > self._max_chars:
            return text[: self._max_chars] + "…[truncated]"
        return text

    def prefix_hashes(self, role_texts: Iterable[tuple[str, str]]) -> list[str] | None:
        """In hash mode, one keyed hash per message part, each of the conversation up to and
        including it: two requests share the first k hashes exactly when their first k parts
        are the same, which is what a replay needs to share prompt prefixes. Truncated to
        128 bits to keep a long conversation's log line short."""
        if self.mode != HASH:
            return None
        running = hmac.new(self._key, digestmod=hashlib.sha256)
        hashes = []
        for role, text in role_texts:
            for piece in (role, text):
                data = piece.encode("utf-8", "surrogatepass")
                running.update(len(data).to_bytes(8, "big") + data)  # unambiguous boundaries
            hashes.append(running.copy().hexdigest()[:32])
        return hashes

    def messages(
        self, role_texts: Iterable[tuple[str, str]], finish_reason: str | None = None
    ) -> list[dict[str, Any]] | None:
        """GenAI-convention message objects, with each text part run through the policy."""
        if self.mode == OFF:
            return None
        out: list[dict[str, Any]] = []
        for role, text in role_texts:
            recorded = self.apply(text)
            if recorded is None:
                continue
            message: dict[str, Any] = {
                "role": role,
                "parts": [{"type": "text", "content": recorded}],
            }
            if finish_reason is not None:
                message["finish_reason"] = finish_reason
            out.append(message)
        return out


def request_texts(payload: Any) -> list[tuple[str, str]]:
    """(role, text) pairs of a chat or completions request body."""
    if not isinstance(payload, dict):
        return []
    texts: list[tuple[str, str]] = []
    messages = payload.get("messages")
    if isinstance(messages, list):
        for message in messages:
            if not isinstance(message, dict):
                continue
            role = str(message.get("role", "user"))
            content = message.get("content")
            if isinstance(content, str):
                texts.append((role, content))
            elif isinstance(content, list):
                for part in content:
                    if isinstance(part, dict) and isinstance(part.get("text"), str):
                        texts.append((role, part["text"]))
    prompt = payload.get("prompt")
    if isinstance(prompt, str):
        texts.append(("user", prompt))
    elif isinstance(prompt, list):
        texts.extend(("user", p) for p in prompt if isinstance(p, str))
    return texts


def content_policy(s: Settings, environ: Mapping[str, str] = os.environ) -> ContentPolicy:
    """The content policy the settings describe; refuses what cannot work (hash without key)."""
    flag, variable = "--content-hash-key-file", "CONTENT_HASH_KEY"
    key = secret_key(s.content_hash_key_file, flag, variable, environ)
    try:
        hook = load_audit_hook(s.audit_hook) if s.audit_hook else None
        return ContentPolicy(
            s.content_capture,
            hash_key=key,
            patterns=s.redact_pattern,
            audit_hook=hook,
            max_chars=s.content_max_chars,
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from None

"""vLLM's `--api-key`: every /v1 path needs `Authorization: Bearer <one of the keys>`.

As vLLM's AuthenticationMiddleware (vllm/entrypoints/openai/server_utils.py) has it: OPTIONS
and paths outside /v1 (/health, /metrics, /tokenize) pass; a missing or wrong key is a 401
with `{"error": "Unauthorized"}`; keys are compared as SHA-256 digests in constant time.
"""

from __future__ import annotations

import argparse
import hashlib
import secrets
from collections.abc import Mapping, Sequence

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send


class AuthenticationMiddleware:
    def __init__(self, app: ASGIApp, tokens: Sequence[str]) -> None:
        self.app = app
        self._digests = [hashlib.sha256(token.encode()).digest() for token in tokens]

    def _verified(self, headers: Headers) -> bool:
        scheme, _, token = headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer":
            return False
        digest = hashlib.sha256(token.encode()).digest()
        matched = False
        for expected in self._digests:
            matched |= secrets.compare_digest(digest, expected)
        return matched

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] != "OPTIONS":
            path = scope["path"].removeprefix(scope.get("root_path", ""))
            if path.startswith("/v1") and not self._verified(Headers(scope=scope)):
                await JSONResponse({"error": "Unauthorized"}, status_code=401)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def api_keys(args: argparse.Namespace, environ: Mapping[str, str]) -> list[str]:
    """The keys /v1 paths require, as vLLM takes them: --api-key, else $VLLM_API_KEY."""
    return [key for key in (args.api_key or [environ.get("VLLM_API_KEY", "")]) if key]

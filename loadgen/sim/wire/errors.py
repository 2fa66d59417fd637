"""vLLM's error bodies, as vLLM 0.32 words them. Pure, no I/O.

Every error is `{"error": {"message", "type", "param", "code"}}` with code = the HTTP status.
vLLM raises them in three ways, and each has its own look (recorded from live vLLM in
tests/real_vllm/vllm_wire.json):

- a body its pydantic request model rejects (FastAPI validates it before vLLM's handler
  runs): 400, type "Bad Request" (the HTTP phrase), param the first error's location
  (`body.max_tokens`), message `N validation error(s):` and one line per pydantic error, the
  error's dict as Python prints it, with its `input` cut down to a short string (vLLM's
  `validation_exception_handler`, at most 10 lines);
- a value vLLM checks itself (`VLLMValidationError`): 400 `BadRequestError`, param the
  parameter, message `<text> (parameter=<name>, value=<value>)`;
- a plain `ValueError`: 400 `BadRequestError`, param null, the bare text; and 404
  `NotFoundError` for a model that is not served.
A body that is not UTF-8 never reaches vLLM's handlers: FastAPI answers it, 400
`{"detail": "There was an error parsing the body"}`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

_ERROR_TYPES = {400: "BadRequestError", 404: "NotFoundError"}
# vLLM's validation handler names the type by the HTTP phrase
_INVALID_BODY = "Bad Request"
# vLLM bounds what a validation error echoes (validation.py in its exception handlers)
_MAX_REPORTED_ERRORS = 10
_MAX_ERROR_INPUT_CHARS = 200
_MAX_ERROR_CHARS = 1000


class ApiError(Exception):
    def __init__(
        self, status: int, message: str, param: str | None = None, kind: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.kind = kind or _ERROR_TYPES.get(status, "InternalServerError")

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.status,
            }
        }


def invalid(message: str, parameter: str | None = None, value: Any = None) -> ApiError:
    """vLLM's VLLMValidationError: the parameter and the value it refused follow the text."""
    extras = [f"parameter={parameter}"] if parameter is not None else []
    if value is not None:
        extras.append(f"value={value}")
    return ApiError(400, f"{message} ({', '.join(extras)})" if extras else message, parameter)


def summarize(value: Any) -> str:
    """A validation error's `input` as vLLM reports it: containers described, not shown."""
    if isinstance(value, str):
        if len(value) > _MAX_ERROR_INPUT_CHARS:
            return value[:_MAX_ERROR_INPUT_CHARS] + "...[truncated]"
        return value
    if isinstance(value, list | tuple | set | frozenset | dict):
        return f"<{type(value).__name__} of {len(value)} items>"
    text = str(value)
    if len(text) > _MAX_ERROR_INPUT_CHARS:
        return text[:_MAX_ERROR_INPUT_CHARS] + "...[truncated]"
    return text


@dataclass(frozen=True, slots=True)
class FieldError:
    """One pydantic validation error: its type, where (`("body", "max_tokens")`), its
    message, the offending input and pydantic's context (`{"ge": 0}`), if any."""

    kind: str
    loc: tuple[str | int, ...]
    msg: str
    input: Any
    ctx: dict[str, Any] | None = None

    @property
    def where(self) -> str:
        return ".".join(map(str, self.loc))

    def line(self) -> str:
        error: dict[str, Any] = {
            "type": self.kind,
            "loc": self.where,
            "msg": self.msg,
            "input": summarize(self.input),
        }
        if self.ctx is not None:
            error["ctx"] = self.ctx
        text = str(error)
        return text[:_MAX_ERROR_CHARS] + "...[truncated]" if len(text) > _MAX_ERROR_CHARS else text


def validation_failed(errors: list[FieldError]) -> ApiError:
    """The 400 vLLM answers for a body its request model rejected."""
    count = len(errors)
    label = "error" if count == 1 else "errors"
    reported = errors[:_MAX_REPORTED_ERRORS]
    message = f"{count} validation {label}:\n" + "".join(f"  {e.line()}\n" for e in reported)
    if count > len(reported):
        message += f"  ...and {count - len(reported)} more {label}\n"
    return ApiError(400, message.rstrip(), errors[0].where, _INVALID_BODY)


class DetailError(ApiError):
    """An error FastAPI answers itself, in its own format: `{"detail": message}`."""

    def body(self) -> dict[str, Any]:
        return {"detail": self.message}


def unparsable_body() -> ApiError:
    """A body FastAPI cannot even decode as text (not UTF-8)."""
    return DetailError(400, "There was an error parsing the body", None, _INVALID_BODY)

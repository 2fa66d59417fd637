"""Field validation as vLLM's request models do it (pydantic 2, lax mode). Pure, no I/O.

vLLM 0.32 declares its request bodies as pydantic models, and FastAPI validates the parsed
JSON against them before vLLM sees the request, in pydantic's lax mode: `"max_tokens": "5"`
and `"stream": "yes"` are accepted, `"max_tokens": "abc"` is an `int_parsing` error. The
coercions below follow pydantic's rules for the types the simulator's fields have (int,
float, bool, str, lists of them, a nested object), with pydantic's error types and messages;
`Fields` collects the errors of one body in field order, as pydantic reports them.
errors.validation_failed turns them into vLLM's 400.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from loadgen.sim.wire.errors import FieldError

Loc = tuple[str | int, ...]
Coerce = Callable[[Any], Any]

_DIGITS = r"[0-9](?:_?[0-9])*"
_INT_TEXT = re.compile(rf"[+-]?{_DIGITS}(?:\.0+)?")
_FLOAT_TEXT = re.compile(
    rf"[+-]?(?:(?:{_DIGITS})?\.{_DIGITS}|{_DIGITS}\.?)(?:[eE][+-]?_?{_DIGITS})?"
    r"|[+-]?(?:inf|infinity|nan)",
    re.IGNORECASE,
)
_TRUE = frozenset({"1", "on", "t", "true", "y", "yes"})
_FALSE = frozenset({"0", "off", "f", "false", "n", "no"})
_INT64_LIMIT = 2**63


class Invalid(Exception):
    """A value a field refused: its errors, each located relative to the field."""

    def __init__(self, errors: list[tuple[Loc, str, str, Any, dict[str, Any] | None]]) -> None:
        super().__init__(errors)
        self.errors = errors


def bad(kind: str, msg: str, value: Any, ctx: dict[str, Any] | None = None) -> Invalid:
    return Invalid([((), kind, msg, value, ctx)])


def lax_int(value: Any) -> int:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise bad("finite_number", "Input should be a finite number", value)
        if not value.is_integer():
            raise bad(
                "int_from_float",
                "Input should be a valid integer, got a number with a fractional part",
                value,
            )
        if abs(value) >= _INT64_LIMIT:
            raise bad(
                "int_parsing_size",
                "Unable to parse input string as an integer, exceeded maximum size",
                value,
            )
        return int(value)
    if isinstance(value, str):
        text = value.strip()
        if _INT_TEXT.fullmatch(text):
            try:
                return int(text.partition(".")[0])
            except ValueError:  # beyond Python's digit limit for int()
                raise bad(
                    "int_parsing_size",
                    "Unable to parse input string as an integer, exceeded maximum size",
                    value,
                ) from None
        raise bad(
            "int_parsing",
            "Input should be a valid integer, unable to parse string as an integer",
            value,
        )
    raise bad("int_type", "Input should be a valid integer", value)


def lax_float(value: Any) -> float:
    if isinstance(value, bool | int | float):
        try:
            return float(value)
        except OverflowError:  # an integer beyond a double
            pass
    elif isinstance(value, str):
        text = value.strip()
        if _FLOAT_TEXT.fullmatch(text):
            return float(text.replace("_", ""))
        message = "Input should be a valid number, unable to parse string as a number"
        raise bad("float_parsing", message, value)
    raise bad("float_type", "Input should be a valid number", value)


def lax_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    unreadable = bad(
        "bool_parsing", "Input should be a valid boolean, unable to interpret input", value
    )
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        if value in (0, 1):
            return bool(value)
        raise unreadable
    if isinstance(value, str):
        if value.lower() in _TRUE:
            return True
        if value.lower() in _FALSE:
            return False
        raise unreadable
    raise bad("bool_type", "Input should be a valid boolean", value)


def strict_str(value: Any) -> str:
    if isinstance(value, str):
        return value
    raise bad("string_type", "Input should be a valid string", value)


def bounded(coerce: Coerce, ge: int | None = None, le: int | None = None) -> Coerce:
    """An int with pydantic's `Field(ge=…, le=…)` constraints."""

    def check(value: Any) -> Any:
        number = coerce(value)
        if ge is not None and number < ge:
            message = f"Input should be greater than or equal to {ge}"
            raise bad("greater_than_equal", message, value, {"ge": ge})
        if le is not None and number > le:
            message = f"Input should be less than or equal to {le}"
            raise bad("less_than_equal", message, value, {"le": le})
        return number

    return check


def list_of(item: Coerce) -> Coerce:
    """`list[item]`: every item's errors, each at its index."""

    def check(value: Any) -> list[Any]:
        if not isinstance(value, list):
            raise bad("list_type", "Input should be a valid list", value)
        items: list[Any] = []
        errors: list[tuple[Loc, str, str, Any, dict[str, Any] | None]] = []
        for index, element in enumerate(value):
            try:
                items.append(item(element))
            except Invalid as exc:
                errors.extend(((index, *loc), *rest) for loc, *rest in exc.errors)
        if errors:
            raise Invalid(errors)
        return items

    return check


def either(*branches: Coerce) -> Coerce:
    """A union (`str | list[str]`): the first branch that accepts the value, else every
    branch's errors in order (pydantic drops the branch names from vLLM's locations).
    Right for unions whose branches do not overlap under lax coercion."""

    def check(value: Any) -> Any:
        errors = []
        for branch in branches:
            try:
                return branch(value)
            except Invalid as exc:
                errors.extend(exc.errors)
        raise Invalid(errors)

    return check


class Fields:
    """One JSON object validated field by field in the model's field order, its errors
    collected (located under `loc`, `("body",)` for a request body) rather than raised."""

    def __init__(self, data: dict[str, Any], loc: Loc = ("body",)) -> None:
        self.data = data
        self.loc = loc
        self.errors: list[FieldError] = []

    def get(
        self,
        key: str,
        coerce: Coerce,
        *,
        default: Any = None,
        required: bool = False,
        nullable: bool = True,
    ) -> Any:
        """The field's value coerced; `default` if it is absent (an error if `required`) or
        invalid. `nullable=False` is a field typed without `| None`: null is an error."""
        if key not in self.data:
            if required:
                self.errors.append(
                    FieldError("missing", (*self.loc, key), "Field required", self.data)
                )
            return default
        value = self.data[key]
        if value is None and nullable:
            return None
        try:
            return coerce(value)
        except Invalid as exc:
            self.add(exc, key)
            return default

    def obj(self, key: str, validate: Callable[[Fields], Any]) -> Any:
        """A nested model (`stream_options`): null or absent is None."""
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, dict):
            self.errors.append(not_an_object((*self.loc, key), value))
            return None
        nested = Fields(value, (*self.loc, key))
        result = validate(nested)
        self.errors.extend(nested.errors)
        return result

    def add(self, exc: Invalid, key: str | int | None = None) -> None:
        at = self.loc if key is None else (*self.loc, key)
        for loc, kind, msg, value, ctx in exc.errors:
            self.errors.append(FieldError(kind, (*at, *loc), msg, value, ctx))


def not_an_object(loc: Loc, value: Any) -> FieldError:
    return FieldError(
        "model_attributes_type",
        loc,
        "Input should be a valid dictionary or object to extract fields from",
        value,
    )

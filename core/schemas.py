"""Ninja schemas every app's API shares."""

from __future__ import annotations

from typing import Any

from ninja import Schema
from ninja.schema import DjangoGetter
from pydantic import model_validator


class Detail(Schema):
    """The body of every error response: what went wrong, in words the caller can act on."""

    detail: str


class ObjectIn(Schema):
    """An object of a request body. ninja's Schema reads attributes of whatever it is given (to
    take ORM rows), so `5`, `"x"`, `true` or `[]` would pass as an object with every field
    left out; here anything but a JSON object is a validation error (422) naming the field."""

    @model_validator(mode="before")
    @classmethod
    def _an_object(cls, data: Any) -> Any:
        # ninja's own validator runs first and hands over its getter around the input.
        given = data._obj if isinstance(data, DjangoGetter) else data
        if not isinstance(given, dict | Schema):
            raise ValueError(f"must be an object, got {_json_type(given)}")
        return data


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return type(value).__name__

"""Ninja schemas every app's API shares."""

from __future__ import annotations

from ninja import Schema


class Detail(Schema):
    """The body of every error response: what went wrong, in words the caller can act on."""

    detail: str

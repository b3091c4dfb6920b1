"""Bounded types of the API's query and path parameters, shared by every app's endpoints.

Python integers and datetimes hold values PostgreSQL does not (OFFSET beyond bigint, ids beyond
bigint, UTC offsets beyond ±15:59): such values are refused as a 422 naming the parameter,
before a query is built, instead of failing inside the database.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator, Field

MAX_PAGE_LIMIT = 500
MAX_OFFSET = 2**31 - 1
MAX_ID = 2**63 - 1  # bigint primary keys
MAX_UTC_OFFSET = timedelta(hours=14)  # the widest offset any real time zone uses


# The date-time forms taken, published as the parameters' pattern: the offset, when there is one,
# within ±14:00 (written +hh:mm or +hhmm).
DATE_TIME_PATTERN = (
    r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(:\d{2}([.,]\d+)?)?([Zz]|[+-]((0\d|1[0-3]):?[0-5]\d|14:?00))?$"
)
_DATE_TIME = re.compile(DATE_TIME_PATTERN, re.ASCII)
_ISO_DATE_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}")


def _date_time_text(value: object) -> object:
    # pydantic would also read a number as Unix time and a bare date as midnight; the schema
    # says date-time, so only that is taken.
    if isinstance(value, str) and not _DATE_TIME.match(value):
        if _ISO_DATE_TIME.match(value) and re.search(r"[+-]\d{2}:?\d{2}$", value):
            raise ValueError("the UTC offset must be between -14:00 and +14:00")
        raise ValueError("must be an ISO 8601 date-time, e.g. 2026-12-01T08:00:00Z")
    return value


def _utc(value: datetime) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        # A time without a zone means UTC, as documented on the parameter.
        return value.replace(tzinfo=UTC)
    offset = value.utcoffset()
    assert offset is not None
    if abs(offset) > MAX_UTC_OFFSET:
        raise ValueError("the UTC offset must be between -14:00 and +14:00")
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise ValueError("out of range once converted to UTC") from None


PageLimit = Annotated[int, Field(ge=1, le=MAX_PAGE_LIMIT, description="items per page")]
PageOffset = Annotated[int, Field(ge=0, le=MAX_OFFSET, description="items to skip")]
Id = Annotated[int, Field(ge=1, le=MAX_ID)]
Instant = Annotated[
    datetime,
    BeforeValidator(_date_time_text),
    AfterValidator(_utc),
    Field(description="ISO 8601; UTC when it has no offset; offsets within ±14:00",
          json_schema_extra={"pattern": DATE_TIME_PATTERN}),
]
FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]

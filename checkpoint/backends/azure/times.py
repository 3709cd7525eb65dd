"""Times from the SDKs as plain, timezone-aware UTC datetimes."""

from __future__ import annotations

from datetime import UTC, datetime


def as_utc(moment: datetime) -> datetime:
    """``moment`` as a plain ``datetime`` in UTC.

    The SDKs return aware datetimes, the tables SDK as its ``TablesEntityDatetime``
    subclass (which carries the service's string along); callers get neither surprise.
    A naive value is taken to be UTC already.
    """
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    moment = moment.astimezone(UTC)
    return datetime(
        moment.year,
        moment.month,
        moment.day,
        moment.hour,
        moment.minute,
        moment.second,
        moment.microsecond,
        tzinfo=UTC,
    )

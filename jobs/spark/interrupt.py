"""How a chunk's Spark work is marked, and cut short, in each kind of session.

A classic session (the worker is the driver) marks work with a **job group** in the
calling thread's local properties and cancels it with ``cancelJobGroup``; Spark kills
the group's running tasks (``interruptOnCancel``). A Spark Connect session has no
SparkContext: it marks the operations a thread starts with a **tag** and interrupts
them with ``interruptTag``, which the server turns into cancelling their jobs.

Both are entered and left on the chunk's own thread (group and tags are per thread)
and cancelled from any thread (the chunk's watcher).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from jobs.spark.session import is_connect

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: The local properties a job group sets on the calling thread.
_GROUP_PROPERTIES = ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel")


class Interrupter(Protocol):
    """Marks the Spark work a thread starts, and cuts it short."""

    def enter(self) -> None:
        """From now on, mark the work this thread starts (on the chunk's thread)."""

    def cancel(self) -> None:
        """Cut the marked work short (from any thread)."""

    def leave(self) -> None:
        """Stop marking this thread's work, as before :meth:`enter` (chunk's thread)."""


def interrupter_for(
    spark: SparkSession, name: str, description: str, attempt_tag: str | None = None
) -> Interrupter:
    """The way to mark and cut short work under ``name`` in ``spark``'s kind of session
    (Connect operations also carry ``attempt_tag``, if given)."""
    if is_connect(spark):
        return OperationTag(spark, name, attempt_tag)
    return JobGroup(spark, name, description)


class JobGroup:
    """A classic session's job group ``name``, with ``interruptOnCancel``."""

    def __init__(self, spark: SparkSession, name: str, description: str):
        self._context = spark.sparkContext
        self._name = name
        self._description = description
        self._previous: dict[str, str | None] = {}

    def enter(self) -> None:
        # Restored on leaving, so a group nested in another does not leave the outer
        # one without its id.
        self._previous = {key: self._context.getLocalProperty(key) for key in _GROUP_PROPERTIES}
        self._context.setJobGroup(self._name, self._description, interruptOnCancel=True)

    def cancel(self) -> None:
        self._context.cancelJobGroup(self._name)

    def leave(self) -> None:
        for key, value in self._previous.items():
            # None removes the property (as pyspark's docstring says), but pyspark's own
            # annotation of ``value`` is ``str``: a third-party annotation bug.
            self._context.setLocalProperty(key, value)  # type: ignore[arg-type]


class OperationTag:
    """A Spark Connect session's operation tag ``name``, and the attempt's tag.

    Tags add up: a tag entered inside another's block marks the inner work with both,
    so cancelling the outer one cuts it short too, as with nested job groups in
    effect. Leaving removes only this tag. ``attempt_tag`` (the same for every block
    of one attempt of a chunk) is what an attempt taking the chunk over interrupts,
    knowing it from the chunk's record (:mod:`jobs.spark.reaper`); it is never
    cancelled by this block, and an inner block leaves the outer one's in place.
    """

    def __init__(self, spark: SparkSession, name: str, attempt_tag: str | None = None):
        self._spark = spark
        self._name = name
        self._attempt_tag = attempt_tag
        self._added_attempt_tag = False

    def enter(self) -> None:
        self._spark.addTag(self._name)
        if self._attempt_tag is not None and self._attempt_tag not in self._spark.getTags():
            self._spark.addTag(self._attempt_tag)
            self._added_attempt_tag = True

    def cancel(self) -> None:
        self._spark.interruptTag(self._name)

    def leave(self) -> None:
        self._spark.removeTag(self._name)
        if self._added_attempt_tag and self._attempt_tag is not None:
            self._spark.removeTag(self._attempt_tag)
            self._added_attempt_tag = False

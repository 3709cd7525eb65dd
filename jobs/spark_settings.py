"""How a worker process's SparkSession is built: master and conf, from class and environment.

This is the one place Spark settings are read from the environment
(``RUNNER_SPARK_MASTER``, ``RUNNER_SPARK_CONF``); they are read when a session is first
wanted, never at import time.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from checkpoint.errors import ConfigurationError
from jobs.job import ChunkedJob

__all__ = [
    "CONF_ENV",
    "DEFAULT_CONF",
    "DEFAULT_MASTER",
    "MASTER_ENV",
    "SparkSettings",
    "conf_strings",
]

#: Environment variable naming the Spark master (``runner start --spark-master`` sets it).
MASTER_ENV = "RUNNER_SPARK_MASTER"
#: Environment variable holding extra Spark conf as a JSON object, e.g.
#: ``{"spark.executor.memory": "4g"}``; it wins over the job class's ``spark_conf``.
CONF_ENV = "RUNNER_SPARK_CONF"
#: The master when neither the job class nor the environment names one.
DEFAULT_MASTER = "local[*]"
#: Conf every session gets unless overridden: stage progress bars would flood workers'
#: stderr (and interleave between worker processes).
DEFAULT_CONF: Mapping[str, str] = MappingProxyType({"spark.ui.showConsoleProgress": "false"})
DEFAULT_APP_NAME = "chunkrunner"


@dataclass(frozen=True)
class SparkSettings:
    """How this worker process's SparkSession is built.

    Attributes:
        master: the Spark master URL (``local[*]``, ``spark://host:7077``, ``yarn``, ...).
        conf: Spark conf, all values strings.
        app_name: the application name Spark shows.
    """

    master: str = DEFAULT_MASTER
    conf: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_CONF))
    app_name: str = DEFAULT_APP_NAME

    @classmethod
    def for_job(
        cls, job_class: type[ChunkedJob] | None = None, environ: Mapping[str, str] | None = None
    ) -> SparkSettings:
        """The settings for ``job_class``: the environment over the class over defaults.

        The environment wins so an operator can point the same code at a cluster
        (``RUNNER_SPARK_MASTER``) or tune it (``RUNNER_SPARK_CONF``) without editing it.
        This is the one place Spark settings are read from the environment.

        Raises:
            ConfigurationError: ``RUNNER_SPARK_CONF`` is not a JSON object of scalars.
        """
        environ = os.environ if environ is None else environ
        master = getattr(job_class, "spark_master", None) or DEFAULT_MASTER
        conf = dict(DEFAULT_CONF)
        conf.update(conf_strings(getattr(job_class, "spark_conf", {}), "spark_conf"))
        if environ.get(MASTER_ENV, "").strip():
            master = environ[MASTER_ENV].strip()
        if environ.get(CONF_ENV, "").strip():
            conf.update(conf_strings(_parse_conf(environ[CONF_ENV]), CONF_ENV))
        return cls(master=master, conf=conf, app_name=conf.get("spark.app.name", DEFAULT_APP_NAME))


def _parse_conf(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigurationError(f"{CONF_ENV} is not JSON: {error}") from error


def conf_strings(conf: Any, source: str) -> dict[str, str]:
    """Spark conf values as Spark wants them: strings, booleans in lower case."""
    if not isinstance(conf, Mapping):
        raise ConfigurationError(f"{source} must be a JSON object / mapping, not {conf!r}")
    strings = {}
    for key, value in conf.items():
        if not isinstance(key, str) or not isinstance(value, (str, int, float, bool)):
            raise ConfigurationError(f"{source}: {key!r}: {value!r} is not a Spark conf entry")
        strings[key] = str(value).lower() if isinstance(value, bool) else str(value)
    return strings

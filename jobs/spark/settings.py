"""How a worker process's SparkSession is built: master or remote, and conf, from class
and environment.

A worker either is a Spark driver itself (a ``master``: ``local[*]`` by default, or a
cluster's ``spark://...``, ``yarn``, ...) or a thin Spark Connect client of a shared
server (a ``remote``: ``sc://host:port``), which runs no JVM in the worker at all.

This is the one place Spark settings are read from the environment
(``RUNNER_SPARK_MASTER``, ``RUNNER_SPARK_REMOTE``, ``RUNNER_SPARK_CONF``); they are read
when a session is first wanted, never at import time.
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
    "REMOTE_ENV",
    "SparkSettings",
    "check_remote",
    "conf_strings",
]

#: Environment variable naming the Spark master (``runner start --spark-master`` sets it).
MASTER_ENV = "RUNNER_SPARK_MASTER"
#: Environment variable naming a Spark Connect server (``runner start --spark-remote``
#: sets it): ``sc://host:port``, with Connect's optional ``/;param=value`` parts.
REMOTE_ENV = "RUNNER_SPARK_REMOTE"
#: The scheme of a Spark Connect URL.
REMOTE_SCHEME = "sc://"
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
        master: the Spark master URL (``local[*]``, ``spark://host:7077``, ``yarn``, ...)
            of the driver the worker runs itself; not used with ``remote``.
        conf: Spark conf, all values strings. With ``remote``, only what a Connect
            session may change (runtime SQL conf) applies; see :mod:`jobs.spark.session`.
        app_name: the application name Spark shows (a driver's; a Connect server has
            its own).
        remote: the Spark Connect URL (``sc://host:port``) when the worker is a thin
            client of a shared server instead of a driver; None otherwise.
    """

    master: str = DEFAULT_MASTER
    conf: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_CONF))
    app_name: str = DEFAULT_APP_NAME
    remote: str | None = None

    def __post_init__(self) -> None:
        if self.remote is not None:
            check_remote(self.remote, "remote")

    @property
    def runs_locally(self) -> bool:
        """True when every executor runs on this machine: a ``local`` master, no remote.

        Only then is a path on this machine's disk sure to be readable by Spark's
        executors (a cluster's, or a Connect server's, run elsewhere).
        """
        return self.remote is None and self.master.startswith("local")

    @property
    def target(self) -> str:
        """Where the work runs, as a URL: the remote if any, else the master."""
        return self.remote or self.master

    @classmethod
    def for_job(
        cls, job_class: type[ChunkedJob] | None = None, environ: Mapping[str, str] | None = None
    ) -> SparkSettings:
        """The settings for ``job_class``: the environment over the class over defaults.

        The environment wins so an operator can point the same code at a cluster
        (``RUNNER_SPARK_MASTER``, ``RUNNER_SPARK_REMOTE``) or tune it
        (``RUNNER_SPARK_CONF``) without editing it. A master or a remote named in the
        environment replaces the class's choice of either. This is the one place Spark
        settings are read from the environment.

        Raises:
            ConfigurationError: ``RUNNER_SPARK_CONF`` is not a JSON object of scalars;
                both ``RUNNER_SPARK_MASTER`` and ``RUNNER_SPARK_REMOTE`` are set; a
                remote that is not an ``sc://`` URL.
        """
        environ = os.environ if environ is None else environ
        master = getattr(job_class, "spark_master", None) or DEFAULT_MASTER
        remote = getattr(job_class, "spark_remote", None)
        conf = dict(DEFAULT_CONF)
        conf.update(conf_strings(getattr(job_class, "spark_conf", {}), "spark_conf"))
        env_master = environ.get(MASTER_ENV, "").strip()
        env_remote = environ.get(REMOTE_ENV, "").strip()
        if env_master and env_remote:
            raise ConfigurationError(
                f"{MASTER_ENV} and {REMOTE_ENV} are both set: a worker is either a Spark "
                "driver (a master) or a Spark Connect client (a remote), not both"
            )
        if env_master:
            master, remote = env_master, None
        if env_remote:
            remote = check_remote(env_remote, REMOTE_ENV)
        if environ.get(CONF_ENV, "").strip():
            conf.update(conf_strings(_parse_conf(environ[CONF_ENV]), CONF_ENV))
        app_name = conf.get("spark.app.name", DEFAULT_APP_NAME)
        return cls(master=master, conf=conf, app_name=app_name, remote=remote)


def check_remote(remote: str, source: str) -> str:
    """``remote`` if it is a Spark Connect URL (``sc://host[:port][/;param=value...]``).

    Raises:
        ConfigurationError: anything else, naming ``source``.
    """
    if not isinstance(remote, str) or not remote.startswith(REMOTE_SCHEME):
        raise ConfigurationError(
            f"{source} must be a Spark Connect URL like sc://host:15002, not {remote!r}"
        )
    host = remote[len(REMOTE_SCHEME) :].split("/", 1)[0].rsplit(":", 1)[0]
    if not host:
        raise ConfigurationError(f"{source} names no host: {remote!r}")
    return remote


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

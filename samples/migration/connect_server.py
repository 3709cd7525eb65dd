"""A Spark Connect server run as a plain PySpark application: ``spark-submit`` this file.

    spark-submit --master URL --conf spark.connect.grpc.binding.port=P \
        --conf spark.sql.artifact.isolation.enabled=false connect_server.py

Spark's own launcher (``SparkConnectServer``, ``sbin/start-connect-server.sh``) forces
``spark.sql.artifact.isolation.enabled=true`` whatever ``--conf`` says: every client
session then gets class loaders of its own on the driver and on every executor, so the
code Spark generates for a plan is compiled, and warmed by the JIT, again in each new
session. A chunked job opens a session per worker process, and each paid it over its
first batches (BENCHMARKS.md, "Spark Connect sessions that share compiled code"). Started
here, as the Connect plugin of an ordinary application, the server takes the conf as
given. What isolation off gives up: jars, files or Python modules a client adds to its
session are seen by every session; jobs that add none, as the migration, lose nothing.
SIGTERM stops it.
"""

from __future__ import annotations

import signal
import threading

from pyspark.sql import SparkSession


def main() -> None:
    stopping = threading.Event()
    # Set off the handler's thread: the main thread may be inside stopping.wait, holding
    # the event's lock (runner/worker/signal_safe.py).
    signal.signal(
        signal.SIGTERM, lambda *_: threading.Thread(target=stopping.set, daemon=True).start()
    )
    spark = SparkSession.builder.config(
        "spark.plugins", "org.apache.spark.sql.connect.SparkConnectPlugin"
    ).getOrCreate()
    print("Spark Connect server started (the plugin of a PySpark application)", flush=True)
    try:
        stopping.wait()
    finally:
        spark.stop()


if __name__ == "__main__":
    main()

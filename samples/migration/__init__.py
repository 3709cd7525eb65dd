"""Batch-migration sample: legacy "orders v1" JSON lines in the blob store -> typed v2 Parquet.

- :mod:`.generate` writes deterministic, dirty v1 data into a blob container;
- :mod:`.transform` is the one PySpark transform (v1 -> v2 orders + rejects);
- :mod:`.job` runs it chunk by chunk (``MigrateOrders``), resumable per input file;
- :mod:`.verify` runs the same transform once over all the input and compares;
- :mod:`.demo` does all of it with two workers, one of them SIGKILLed mid-way.
"""

"""The job catalogue: job records in the table ``runnerjobs`` and their index.

``job_records``: create, read, scan, change and delete a job's record; ``job_index``:
the active rows and the ended jobs' counts; ``job_moves``: a change of state written
with its index rows in one batch. Callers use :class:`checkpoint.store.CheckpointStore`.
"""

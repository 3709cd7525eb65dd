"""The task records of a job in the table ``runnertasks``: written, counted and read.

``task_records``: planning's pages of chunks, a task's fenced writes; ``counting``: the
shard counters of done and poisoned chunks; ``chunk_pages``: a page of chunks at a
bounded cost; ``reading``: a job's counts, chunks, results and outputs. Callers use
:class:`checkpoint.store.CheckpointStore`.
"""

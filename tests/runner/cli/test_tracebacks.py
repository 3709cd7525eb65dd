"""A stored traceback from the user's first frame (runner/cli/tracebacks.py): the
engine's frames above it are left out by ``runner report`` and folded on the
dashboard."""

from __future__ import annotations

from runner.cli.tracebacks import Piece, traceback_parts, user_traceback

#: As a worker on another machine stored it: our packages under its site-packages.
ENGINE = (
    '  File "/opt/app/lib/python3.11/site-packages/runner/worker/tasks/run.py", line 76, '
    "in _execute\n"
    "    outcome = run_user_code(worker.store, delivery.job_class, job, control)\n"
    "              ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
    '  File "/opt/app/lib/python3.11/site-packages/runner/worker/tasks/user_code.py", '
    "line 65, in run_user_code\n"
    "    return instance.process(chunk)\n"
)
USER = (
    '  File "/home/me/orders/jobs_of_mine.py", line 7, in process\n'
    "    return helper(chunk.payload)\n"
    '  File "/home/me/orders/jobs_of_mine.py", line 9, in helper\n'
    "    chunk.checkpoint(state)\n"
)
#: Below the user's frame, the engine's frames stay: the user called them.
CALLED = (
    '  File "/opt/app/lib/python3.11/site-packages/jobs/chunk.py", line 200, in checkpoint\n'
    "    self._control.offer(state)\n"
)
HEAD = "Traceback (most recent call last):\n"
TAIL = "ValueError: bad 1\n"


def test_the_engine_frames_above_the_users_are_left_out_and_counted():
    text = HEAD + ENGINE + USER + CALLED + TAIL
    assert traceback_parts(text) == [
        Piece(HEAD),
        Piece(ENGINE, engine_frames=2),
        Piece(USER + CALLED + TAIL),
    ]
    assert user_traceback(text) == HEAD + "  [2 engine frame(s) left out]\n" + USER + CALLED + TAIL


def test_each_traceback_of_a_chain_starts_at_the_users_frames():
    cause = HEAD + ENGINE + USER + "KeyError: 'numbers'\n"
    between = "\nThe above exception was the direct cause of the following exception:\n\n"
    text = cause + between + HEAD + ENGINE + USER + TAIL
    shown = user_traceback(text, "{n} more: runner report --full")
    assert shown == (
        HEAD
        + "  [2 more: runner report --full]\n"
        + USER
        + "KeyError: 'numbers'\n"
        + between
        + HEAD
        + "  [2 more: runner report --full]\n"
        + USER
        + TAIL
    )


def test_a_traceback_with_no_frame_of_the_users_is_shown_whole():
    engine_only = HEAD + ENGINE + CALLED + "StorageTrouble: the store did not answer\n"
    assert user_traceback(engine_only) == engine_only
    assert user_traceback("") == ""
    assert user_traceback("no traceback at all\n") == "no traceback at all\n"


def test_a_standard_library_frame_above_the_users_folds_with_the_engines(tmp_path):
    import threading

    pool = f'  File "{threading.__file__}", line 975, in run\n    self._target()\n'
    text = HEAD + pool + ENGINE + USER + TAIL
    assert traceback_parts(text)[1] == Piece(pool + ENGINE, engine_frames=3)


def test_a_module_of_the_users_named_like_ours_is_the_users():
    # Only a module our packages have is the engine's: the user's own runner/ is not
    theirs = '  File "/home/me/runner/steps.py", line 3, in step\n    go()\n'
    text = HEAD + ENGINE + theirs + TAIL
    assert traceback_parts(text)[1:] == [Piece(ENGINE, engine_frames=2), Piece(theirs + TAIL)]

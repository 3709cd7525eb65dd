"""``checkpoint.records``: what a task record's error fields hold, and how they clear."""

from __future__ import annotations

from checkpoint.records import MAX_ERROR_CHARS, error_properties, record_name


def test_error_fields_keep_the_start_of_the_message_and_the_end_of_the_traceback():
    error = ValueError("m" * MAX_ERROR_CHARS + "CUT")
    traceback_text = "CUT" + "t" * MAX_ERROR_CHARS

    fields = error_properties(error, traceback_text)

    assert fields["error_type"] == "ValueError"
    assert fields["error_message"] == "m" * MAX_ERROR_CHARS
    assert fields["error_traceback"] == "t" * MAX_ERROR_CHARS


def test_no_error_clears_the_fields_with_empty_strings():
    # A merge keeps a property set to None, so clearing writes empty strings
    assert error_properties(None) == {"error_type": "", "error_message": "", "error_traceback": ""}


def test_records_are_named_as_messages_say_them():
    assert record_name("j", "job") == "job 'j'"
    assert record_name("j", "chunk", 7) == "chunk 7 of job 'j'"
    assert record_name("j", "plan") == "plan of job 'j'"

"""Quickstart sample: count the words of a folder of text files, one chunk per file."""

"""Tests of runner/cli/dashboard/: one module's tests named after it."""

"""Tests of the experiment study service (both backends)."""

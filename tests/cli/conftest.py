"""Fixtures of the command-line tests; the helpers are in ``helpers.py``."""

from __future__ import annotations

import pytest

from .helpers import Invoke, invoke_cli


@pytest.fixture
def cli() -> Invoke:
    return invoke_cli

"""Test support for suites built on benchledger: a pytest plugin and factories.

The plugin loads by itself through the ``pytest11`` entry point once
benchledger is installed.
"""

from benchledger.testing.databases import DatabaseFactory, PostgresServer

__all__ = ["DatabaseFactory", "PostgresServer"]

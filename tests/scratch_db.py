"""A database of a test's own, for migration tests: created empty on the test server, migrated to
chosen states with Django's migration executor, dropped afterwards."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.migrations.executor import MigrationExecutor


@contextmanager
def scratch_database(django_db_blocker: Any, *, prefix: str, alias: str) -> Iterator[BaseDatabaseWrapper]:
    """A new database named PREFIX_<random> on the default connection's server, reachable as the
    connection ALIAS while the block runs, dropped after it. Not a django_db test's database: it
    writes only to its own, which the whole test may use."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with django_db_blocker.unblock():
        default = connections["default"]
        with default._nodb_cursor() as cur:
            cur.execute(f'CREATE DATABASE "{name}"')
        connections.settings[alias] = {**default.settings_dict, "NAME": name}
        try:
            yield connections[alias]
        finally:
            connections[alias].close()
            del connections[alias]
            del connections.settings[alias]
            with default._nodb_cursor() as cur:
                cur.execute(f'DROP DATABASE IF EXISTS "{name}"')


def migrate(
    conn: BaseDatabaseWrapper, targets: list[tuple[str, str | None]] | None = None
) -> MigrationExecutor:
    """Migrate CONN to TARGETS (every app's latest when None); an executor whose fresh loader sees
    what is applied now."""
    executor = MigrationExecutor(conn)
    executor.migrate(targets if targets is not None else executor.loader.graph.leaf_nodes())
    return MigrationExecutor(conn)

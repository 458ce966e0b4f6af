"""Schema migrations for the commands: moved to `ledger.store.migrating`, re-exported here."""

from ledger.store.migrating import MigrationFailed, migrate_database, schema_revision, steps_between

__all__ = ["MigrationFailed", "migrate_database", "schema_revision", "steps_between"]

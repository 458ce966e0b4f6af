-- Workers read and write their checkpoints directly (no function: the checkpointer encrypts and
-- authenticates every row). The key administrator reads and rewrites them to re-encrypt, never
-- inserts or deletes. Both read checkpoint_migrations, which the library's `setup()` reads.
GRANT SELECT, INSERT, DELETE, UPDATE ON checkpoint_blobs TO signoff_app;
GRANT SELECT, UPDATE ON checkpoint_blobs TO signoff_key_admin;
GRANT SELECT ON checkpoint_migrations TO signoff_app, signoff_key_admin;
GRANT SELECT, INSERT, DELETE, UPDATE ON checkpoint_writes TO signoff_app;
GRANT SELECT, UPDATE ON checkpoint_writes TO signoff_key_admin;
GRANT SELECT, INSERT, DELETE, UPDATE ON checkpoints TO signoff_app;
GRANT SELECT, UPDATE ON checkpoints TO signoff_key_admin;

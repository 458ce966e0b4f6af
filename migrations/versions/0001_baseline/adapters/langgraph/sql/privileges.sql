GRANT SELECT, INSERT, DELETE, UPDATE ON checkpoint_blobs TO signoff_app;
GRANT SELECT, UPDATE ON checkpoint_blobs TO signoff_key_admin;
GRANT SELECT ON checkpoint_migrations TO signoff_app, signoff_key_admin;
GRANT SELECT, INSERT, DELETE, UPDATE ON checkpoint_writes TO signoff_app;
GRANT SELECT, UPDATE ON checkpoint_writes TO signoff_key_admin;
GRANT SELECT, INSERT, DELETE, UPDATE ON checkpoints TO signoff_app;
GRANT SELECT, UPDATE ON checkpoints TO signoff_key_admin;

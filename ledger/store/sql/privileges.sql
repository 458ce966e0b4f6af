GRANT USAGE ON SCHEMA public TO signoff_auditor;
GRANT SELECT ON alembic_version TO signoff_app, signoff_reviewer, signoff_key_admin, signoff_auditor;

-- The database's session defaults that revision 0002 set go (a value set before it, which the
-- upgrade kept, goes too: the revision cannot tell them apart).
DO $$
BEGIN
    EXECUTE format('ALTER DATABASE %I RESET idle_in_transaction_session_timeout',
                   current_database());
    EXECUTE format('ALTER DATABASE %I RESET statement_timeout', current_database());
EXCEPTION WHEN insufficient_privilege THEN
    RAISE WARNING 'cannot reset the session defaults of database %: not its owner',
        current_database();
END
$$;

-- Every login's sessions in this database end an idle transaction after a minute and a
-- statement after five, whichever roles the login holds: a transaction that holds a
-- transaction id holds back the journal's global order for every reader until it ends
-- (docs/pages/operations/database.md). Role settings (ALTER ROLE signoff_app SET ...) would not
-- do: they apply to the role a session logs in as, never to the roles granted to it. So these
-- are the database's own defaults, which a setting for the login wins over
-- (ALTER ROLE <login> [IN DATABASE <db>] SET ...). A value the database already has is kept:
-- an operator's choice survives migrations. A login that may not alter the database is told
-- what to run instead.
DO $$
DECLARE
    wanted text[][] := ARRAY[['idle_in_transaction_session_timeout', '1min'],
                             ['statement_timeout', '5min']];
    i integer;
BEGIN
    FOR i IN 1 .. array_length(wanted, 1) LOOP
        IF NOT EXISTS (
            SELECT FROM pg_db_role_setting s, pg_database d, unnest(s.setconfig) AS c
            WHERE d.datname = current_database() AND s.setdatabase = d.oid AND s.setrole = 0
              AND c LIKE wanted[i][1] || '=%'
        ) THEN
            BEGIN
                EXECUTE format('ALTER DATABASE %I SET %s = %L',
                               current_database(), wanted[i][1], wanted[i][2]);
            EXCEPTION WHEN insufficient_privilege THEN
                RAISE WARNING 'cannot set % of database %: run ALTER DATABASE %I SET % = % as its owner',
                    wanted[i][1], current_database(), current_database(), wanted[i][1],
                    wanted[i][2];
            END;
        END IF;
    END LOOP;
END
$$;

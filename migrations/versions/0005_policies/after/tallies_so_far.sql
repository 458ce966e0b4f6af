-- The history of the calls recorded before this revision: their counts (their arguments are
-- sealed, so no sums), over the whole run and per hour they started.
INSERT INTO call_tallies (run_id, bucket, tool, calls, sums)
SELECT run_id, '-infinity', tool, count(*), '{}'::jsonb FROM tool_calls
    WHERE status::text NOT IN ('denied', 'responded') GROUP BY run_id, tool
UNION ALL
SELECT run_id, date_trunc('hour', started_at, 'UTC'), tool, count(*), '{}'::jsonb FROM tool_calls
    WHERE status::text NOT IN ('denied', 'responded')
    GROUP BY run_id, date_trunc('hour', started_at, 'UTC'), tool;

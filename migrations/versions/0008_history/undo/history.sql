-- An open loss is not dropped without a word: calls would start again with no record of it.
DO $$
BEGIN
    IF EXISTS (SELECT FROM history_losses WHERE settled_at IS NULL) THEN
        RAISE EXCEPTION 'a loss of committed history is open: settle it (signoff db history '
                'settle) before downgrading, which drops the record of losses'
            USING ERRCODE = '55000';
    END IF;
END
$$;
-- The losses go with the function that reports them; signoff_commit_call comes back from its
-- frozen copy (0007_telemetry), which does not read them.
DROP FUNCTION signoff_report_history_lost(bigint[], text[]);
DROP TABLE history_losses;

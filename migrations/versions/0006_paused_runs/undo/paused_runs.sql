DROP FUNCTION signoff_finish_pause(text, text);
DROP FUNCTION signoff_claim_pause(text, text, double precision);
DROP FUNCTION signoff_pause_run(text, text, text, text[], bytea);
DROP TABLE paused_runs;

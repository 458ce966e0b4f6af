DROP FUNCTION signoff_pause_again(text, text, text, text[], bytea);
DROP FUNCTION signoff_release_pause(text, text);
DROP FUNCTION signoff_renew_pause(text, text, double precision);
DROP FUNCTION signoff_finish_pause(text, text);
DROP FUNCTION signoff_claim_pause(text, text, double precision);
DROP FUNCTION signoff_pause_run(text, text, text, text[], bytea);
DROP TABLE paused_runs;

-- A tool call's effect and status, as domains rather than table CHECKs for the reason of
-- ledger/journal/sql/domains.sql: a domain's check is parsed once per session, a table's in
-- every statement that writes the row, and every step of a call writes it.
CREATE DOMAIN signoff_call_effect AS text;
ALTER DOMAIN signoff_call_effect
    ADD CONSTRAINT signoff_call_effect_check
    CHECK ((VALUE = ANY (ARRAY['read'::text, 'idempotent_write'::text, 'single_attempt'::text])))
    NOT VALID;

CREATE DOMAIN signoff_call_status AS text;
ALTER DOMAIN signoff_call_status
    ADD CONSTRAINT signoff_call_status_check
    CHECK ((VALUE = ANY (ARRAY['running'::text, 'succeeded'::text, 'failed'::text,
        'outcome_unknown'::text, 'denied'::text, 'responded'::text]))) NOT VALID;

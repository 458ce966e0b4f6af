-- A tool call's effect and status, as domains rather than table CHECKs for the reason of
-- ledger/journal/sql/domains.sql: a domain's check is parsed once per session, a table's in
-- every statement that writes the row, and every step of a call writes it.
CREATE DOMAIN signoff_call_effect AS text
    CONSTRAINT signoff_call_effect_check
    CHECK (VALUE IN ('read', 'idempotent_write', 'single_attempt'));

CREATE DOMAIN signoff_call_status AS text
    CONSTRAINT signoff_call_status_check
    CHECK (VALUE IN ('running', 'succeeded', 'failed', 'outcome_unknown', 'denied', 'responded'));

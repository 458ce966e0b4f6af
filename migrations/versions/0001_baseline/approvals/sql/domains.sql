-- An approval's status, as a domain rather than a table CHECK for the reason of
-- ledger/journal/sql/domains.sql: a domain's check is parsed once per session, a table's in
-- every statement that writes the row.
CREATE DOMAIN signoff_approval_status AS text
    CONSTRAINT signoff_approval_status_check
    CHECK (VALUE IN ('pending', 'approved', 'rejected', 'edited', 'responded', 'expired',
                     'cancelled'));

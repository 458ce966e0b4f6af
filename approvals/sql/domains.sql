CREATE DOMAIN signoff_approval_status AS text;
ALTER DOMAIN signoff_approval_status
    ADD CONSTRAINT signoff_approval_status_check CHECK ((VALUE = ANY (ARRAY['pending'::text, 'approved'::text, 'rejected'::text, 'edited'::text, 'responded'::text, 'expired'::text, 'cancelled'::text]))) NOT VALID;

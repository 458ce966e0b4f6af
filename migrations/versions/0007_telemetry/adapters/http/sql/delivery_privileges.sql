-- The service's login (signoff_reviewer) reads how its own targets' deliveries stand, counts
-- only, for its metrics; it still never reads the table.
REVOKE EXECUTE ON FUNCTION signoff_delivery_state(text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION signoff_delivery_state(text[]) TO signoff_reviewer;

-- Before revision 0004 no token was an agent's: agent tokens' rows go with the scope that
-- allowed them, as revision 0003's downgrade drops its e-mail deliveries. Their events stay
-- (the journal is append-only): `token.created` and any `token.revoked` on `token:<id>` still
-- say who made each one, for whom and until when. What goes is what the journal never held:
-- the secret's hash (the tokens authenticate nobody from here on, without a `token.revoked`
-- event) and their last use; `audit_api_tokens` no longer lists them.
DELETE FROM api_tokens WHERE scope = 'agent';
ALTER TABLE api_tokens
    DROP CONSTRAINT api_tokens_scope_check,
    ADD CONSTRAINT api_tokens_scope_check
        CHECK ((scope = ANY (ARRAY['reviewer'::text, 'auditor'::text])));
REVOKE EXECUTE ON FUNCTION signoff_token_use(text, bytea) FROM signoff_app;

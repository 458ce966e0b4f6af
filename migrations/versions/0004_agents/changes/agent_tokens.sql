-- A token of scope agent is what an MCP client presents to the gateway (`signoff mcp`); its
-- `reviewer` is the agent's principal name. The HTTP service refuses such tokens.
ALTER TABLE api_tokens
    DROP CONSTRAINT api_tokens_scope_check,
    ADD CONSTRAINT api_tokens_scope_check
        CHECK ((scope = ANY (ARRAY['reviewer'::text, 'auditor'::text, 'agent'::text])));
-- The gateway runs on a worker's login and checks its clients' agent tokens through this
-- function; it still never reads api_tokens, and the function tells nothing without a token's
-- secret.
GRANT EXECUTE ON FUNCTION signoff_token_use(text, bytea) TO signoff_app;

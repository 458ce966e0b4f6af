-- What auditors read of API tokens: everything but the hashes of the secrets.
CREATE OR REPLACE VIEW audit_api_tokens AS
 SELECT api_tokens.token_id,
    api_tokens.reviewer,
    api_tokens.scope,
    api_tokens.created_by,
    api_tokens.created_at,
    api_tokens.expires_at,
    api_tokens.revoked_at,
    api_tokens.last_used_at
   FROM api_tokens;

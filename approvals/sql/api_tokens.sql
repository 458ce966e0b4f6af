-- API tokens, how reviewers and auditors authenticate to `signoff serve`, and agents (scope
-- agent, `reviewer` their principal name) to the MCP gateway, `signoff mcp`. A token is
-- `sgf_<token id>_<secret>`, shown once when it is made; the table keeps only the SHA-256 of
-- the secret. Making and revoking tokens is the owner's: the row and its `token.created` or
-- `token.revoked` event (stream `token:<id>`, no secret or hash in it) in one transaction. The
-- service's and the gateway's logins never read the table: they call signoff_token_use.
-- `last_used_at` is not history (no event), like a call's lease.
CREATE TABLE api_tokens (
    token_id text NOT NULL,
    secret_hash bytea NOT NULL,
    reviewer text NOT NULL,
    scope text NOT NULL,
    created_by text NOT NULL,
    created_at timestamp with time zone NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    revoked_at timestamp with time zone,
    last_used_at timestamp with time zone,
    CONSTRAINT api_tokens_check CHECK ((expires_at > created_at)),
    -- `reviewer` is normalised by `approvals.identity.reviewer_id`; the check is a backstop.
    CONSTRAINT api_tokens_reviewer_check CHECK (((reviewer <> ''::text)
        AND (length(reviewer) <= 128) AND (reviewer !~ '[[:space:][:cntrl:]]'::text))),
    CONSTRAINT api_tokens_scope_check
        CHECK ((scope = ANY (ARRAY['reviewer'::text, 'auditor'::text, 'agent'::text]))),
    CONSTRAINT api_tokens_secret_hash_check CHECK ((octet_length(secret_hash) = 32)),
    CONSTRAINT api_tokens_token_id_check CHECK ((token_id ~ '^[a-z0-9]{8,64}$'::text)),
    CONSTRAINT api_tokens_pkey PRIMARY KEY (token_id)
);

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
    CONSTRAINT api_tokens_reviewer_check CHECK (((reviewer <> ''::text) AND (length(reviewer) <= 128) AND (reviewer !~ '[[:space:][:cntrl:]]'::text))),
    CONSTRAINT api_tokens_scope_check CHECK ((scope = ANY (ARRAY['reviewer'::text, 'auditor'::text]))),
    CONSTRAINT api_tokens_secret_hash_check CHECK ((octet_length(secret_hash) = 32)),
    CONSTRAINT api_tokens_token_id_check CHECK ((token_id ~ '^[a-z0-9]{8,64}$'::text)),
    CONSTRAINT api_tokens_pkey PRIMARY KEY (token_id)
);

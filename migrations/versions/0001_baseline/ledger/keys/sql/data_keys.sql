CREATE TABLE data_keys (
    key_id text NOT NULL,
    purpose text NOT NULL,
    state text NOT NULL,
    kek_id text NOT NULL,
    wrapped bytea NOT NULL,
    public_key bytea,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    rotated_at timestamp with time zone,
    retired_at timestamp with time zone,
    sealed bigint DEFAULT 0 NOT NULL,
    CONSTRAINT data_keys_key_id_check CHECK ((key_id ~ '^[a-z]+-[0-9a-f]{8,32}$'::text)),
    CONSTRAINT data_keys_purpose_check CHECK ((purpose = ANY (ARRAY['checkpoint'::text, 'result'::text, 'approval_mac'::text, 'digest_signing'::text, 'decision_signing'::text, 'value_mac'::text]))),
    CONSTRAINT data_keys_sealed_check CHECK ((sealed >= 0)),
    CONSTRAINT data_keys_state_check CHECK ((state = ANY (ARRAY['active'::text, 'decrypt_only'::text, 'retired'::text]))),
    CONSTRAINT data_keys_pkey PRIMARY KEY (key_id)
);
CREATE UNIQUE INDEX data_keys_one_active_per_purpose ON data_keys (purpose) WHERE (state = 'active'::text);

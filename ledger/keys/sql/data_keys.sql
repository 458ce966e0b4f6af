-- Data keys, one active per purpose, written only through the key functions. The key material
-- is wrapped (AES-256-GCM under a KEK, bound to the key's id and purpose) and never leaves the
-- database in clear; the KEK never enters it. `public_key` is the Ed25519 public half of a
-- signing key, so what it signed can be checked after the key is retired.
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
    -- Messages sealed under the key: AES-256-GCM with random 96-bit nonces is safe for well
    -- under 2^32 per key. Processes reserve counts in blocks before they seal
    -- (signoff_reserve_nonces); a block lost with its process only makes the count high.
    sealed bigint DEFAULT 0 NOT NULL,
    CONSTRAINT data_keys_key_id_check CHECK ((key_id ~ '^[a-z]+-[0-9a-f]{8,32}$'::text)),
    -- decision_signing keys sign reviewers' decisions (wrapped by the reviewer side's KEK,
    -- which workers never hold); value_mac keys make the digests auditors and exports see keyed.
    CONSTRAINT data_keys_purpose_check CHECK ((purpose = ANY (ARRAY['checkpoint'::text,
        'result'::text, 'approval_mac'::text, 'digest_signing'::text, 'decision_signing'::text,
        'value_mac'::text]))),
    CONSTRAINT data_keys_sealed_check CHECK ((sealed >= 0)),
    CONSTRAINT data_keys_state_check CHECK ((state = ANY (ARRAY['active'::text,
        'decrypt_only'::text, 'retired'::text]))),
    CONSTRAINT data_keys_pkey PRIMARY KEY (key_id)
);
CREATE UNIQUE INDEX data_keys_one_active_per_purpose ON data_keys (purpose)
    WHERE (state = 'active'::text);

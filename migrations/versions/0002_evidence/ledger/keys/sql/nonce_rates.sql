-- Nonces reserved per database login in the current minute, kept by signoff_reserve_nonces
-- (no role reads or writes it directly): a login may reserve at most 2^20 messages a minute
-- under all sealing keys together, so one stolen login needs days, not seconds, to bring a key
-- to its budget (docs/pages/concepts/keys.md).
CREATE TABLE nonce_rates (
    login text NOT NULL,
    window_start timestamp with time zone NOT NULL,
    reserved bigint NOT NULL,
    CONSTRAINT nonce_rates_reserved_check CHECK ((reserved >= 0)),
    CONSTRAINT nonce_rates_pkey PRIMARY KEY (login)
);

-- Nonces reserved per login and minute (ledger/keys/sql/nonce_rates.sql).
CREATE TABLE nonce_rates (
    login text NOT NULL,
    window_start timestamp with time zone NOT NULL,
    reserved bigint NOT NULL,
    CONSTRAINT nonce_rates_reserved_check CHECK ((reserved >= 0)),
    CONSTRAINT nonce_rates_pkey PRIMARY KEY (login)
);

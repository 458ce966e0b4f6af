-- The per-login nonce counter goes; signoff_reserve_nonces is put back by the baseline's copy.
DROP TABLE nonce_rates;

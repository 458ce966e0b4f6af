-- Losses of committed history: a failover that promoted a standby which had not received the
-- primary's last commits, or a restore to an earlier time. PostgreSQL does not say when it
-- happens; a process that had seen the lost events committed does (`ledger.store.fence`) and
-- reports it here, or an operator records it (`signoff db history record`). While a loss is
-- open, signoff_commit_call starts no call (SG410): a call the lost history had run, or whose
-- approval it had consumed, is unknown to the ledger and would run again. An operator settles
-- it (`signoff db history settle`) once the lost calls are accounted for. One loss is open at a
-- time; every report of it while it is open adds nothing. A worker's login can open one (its
-- login is recorded): a way to stop every call until the owner settles it, as its trust allows.
CREATE TABLE public.history_losses (
    loss_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    found_at timestamp with time zone NOT NULL DEFAULT clock_timestamp(),
    found_by text NOT NULL,
    -- Journal positions the reporter saw committed that the database lacks or holds with
    -- another hash, and the hashes (hex) it saw there (both empty when an operator recorded
    -- the loss): a report of the same again, once settled, opens nothing.
    missing bigint[] NOT NULL,
    hashes text[] NOT NULL,
    reason text NOT NULL,
    settled_at timestamp with time zone,
    settled_by text,
    settlement text,
    CHECK ((settled_at IS NULL) = (settled_by IS NULL)
           AND (settled_at IS NULL) = (settlement IS NULL))
);
CREATE UNIQUE INDEX history_losses_open_idx ON public.history_losses ((true))
    WHERE settled_at IS NULL;

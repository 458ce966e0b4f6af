-- langgraph-checkpoint-postgres 3.x's record of the migrations it has run: all of its ten (0 to
-- 9) are recorded, as the tables are created here, so its `setup()` has nothing left to do.
CREATE TABLE checkpoint_migrations (
    v integer NOT NULL,
    CONSTRAINT checkpoint_migrations_pkey PRIMARY KEY (v)
);
INSERT INTO checkpoint_migrations VALUES
    (0),
    (1),
    (2),
    (3),
    (4),
    (5),
    (6),
    (7),
    (8),
    (9);

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

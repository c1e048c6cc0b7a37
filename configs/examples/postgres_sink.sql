-- The table of configs/examples/postgres_sink.yaml: one row per customer,
-- kept equal to the job's running totals. docker-compose.yml's postgres
-- service runs this file when it creates its database.
CREATE TABLE IF NOT EXISTS customer_totals (
    customer   text PRIMARY KEY,
    total      numeric(12, 2) NOT NULL,
    payments   bigint NOT NULL,
    updated_ms bigint NOT NULL   -- the last payment's record time, ms since the epoch
);

-- Usage that bills. usage_daily holds the gateways' requests by vendor,
-- limit policy and UTC day (YYYY-MM-DD), fed by their usage flushes;
-- usage_flushes remembers each flush applied (by its id) for two days, so
-- that a retried flush is counted once. billing_outbox holds one row per
-- billable service (its CloudEvent id), sent or waiting for the exporter.
-- Times are Unix nanoseconds.
CREATE TABLE usage_daily (
    day            TEXT NOT NULL,
    vendor_id      TEXT NOT NULL,
    policy         TEXT NOT NULL,
    allowed        INTEGER NOT NULL,
    limited        INTEGER NOT NULL,
    shadow_limited INTEGER NOT NULL,
    PRIMARY KEY (day, vendor_id, policy)
);
CREATE TABLE usage_flushes (
    id TEXT PRIMARY KEY,
    at INTEGER NOT NULL
);
CREATE INDEX usage_flushes_at ON usage_flushes(at);
CREATE TABLE billing_outbox (
    id              TEXT PRIMARY KEY,
    vendor_id       TEXT NOT NULL,
    order_id        TEXT NOT NULL,
    service         TEXT NOT NULL,
    environment     TEXT NOT NULL,
    outcome         TEXT NOT NULL,
    at              INTEGER NOT NULL,
    attempts        INTEGER NOT NULL,
    next_attempt_at INTEGER NOT NULL,
    sent_at         INTEGER
);
CREATE INDEX billing_outbox_due ON billing_outbox(next_attempt_at) WHERE sent_at IS NULL;

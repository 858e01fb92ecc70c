-- Usage that bills. usage_daily holds the gateways' requests by vendor,
-- limit policy and UTC day (YYYY-MM-DD), fed by their usage flushes;
-- usage_flushes remembers each flush applied (by its id) for two days, so
-- that a retried flush is counted once. billing_outbox holds one row per
-- billable service (its CloudEvent id), sent or waiting for the exporter.
CREATE TABLE usage_daily (
    day            text NOT NULL,
    vendor_id      text NOT NULL,
    policy         text NOT NULL,
    allowed        bigint NOT NULL,
    limited        bigint NOT NULL,
    shadow_limited bigint NOT NULL,
    PRIMARY KEY (day, vendor_id, policy)
);
CREATE TABLE usage_flushes (
    id text PRIMARY KEY,
    at timestamptz NOT NULL
);
CREATE INDEX usage_flushes_at ON usage_flushes (at);
CREATE TABLE billing_outbox (
    id              text PRIMARY KEY,
    vendor_id       text NOT NULL,
    order_id        text NOT NULL,
    service         text NOT NULL,
    environment     text NOT NULL,
    outcome         text NOT NULL,
    at              timestamptz NOT NULL,
    attempts        integer NOT NULL,
    next_attempt_at timestamptz NOT NULL,
    sent_at         timestamptz
);
CREATE INDEX billing_outbox_due ON billing_outbox (next_attempt_at) WHERE sent_at IS NULL;

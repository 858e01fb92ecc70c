-- Vendors, their API keys (stored hashed), orders with one row per ordered
-- service, and idempotency records. The same records as the SQLite store,
-- in PostgreSQL's own types: timestamptz, jsonb, boolean.
CREATE TABLE vendors (
	id               text PRIMARY KEY,
	company_name     text NOT NULL,
	environment      text NOT NULL,
	status           text NOT NULL,
	enabled_services jsonb NOT NULL,
	created_at       timestamptz NOT NULL
);

CREATE TABLE api_keys (
	id          text PRIMARY KEY,
	vendor_id   text NOT NULL REFERENCES vendors(id),
	hash        text NOT NULL UNIQUE,
	prefix      text NOT NULL,
	environment text NOT NULL,
	created_at  timestamptz NOT NULL,
	expires_at  timestamptz NOT NULL,
	revoked_at  timestamptz
);
CREATE INDEX api_keys_vendor ON api_keys (vendor_id, created_at);

CREATE TABLE orders (
	id                 text PRIMARY KEY,
	vendor_id          text NOT NULL REFERENCES vendors(id),
	environment        text NOT NULL,
	mc_number          text NOT NULL,
	external_reference text,
	driver             jsonb NOT NULL,
	created_at         timestamptz NOT NULL,
	status             text NOT NULL,
	final              boolean NOT NULL,
	next_step_at       timestamptz
);
CREATE INDEX orders_vendor_created ON orders (vendor_id, created_at DESC, id DESC);
CREATE INDEX orders_next_step ON orders (next_step_at) WHERE next_step_at IS NOT NULL;
CREATE INDEX orders_unfinished ON orders (created_at) WHERE NOT final;

CREATE TABLE order_services (
	order_id     text NOT NULL REFERENCES orders(id) ON DELETE CASCADE,
	position     integer NOT NULL,
	service      text NOT NULL,
	status       text NOT NULL,
	reason       text,
	state        text,
	completed_at timestamptz,
	report_path  text NOT NULL DEFAULT '',
	result       jsonb,
	steps        integer NOT NULL DEFAULT 0,
	PRIMARY KEY (order_id, service)
);

-- The primary key is the unique constraint that decides two replicas
-- reserving the same Idempotency-Key at the same moment.
CREATE TABLE idempotency (
	vendor_id    text NOT NULL,
	key          text NOT NULL,
	request_hash text NOT NULL,
	order_id     text,
	created_at   timestamptz NOT NULL,
	PRIMARY KEY (vendor_id, key)
);

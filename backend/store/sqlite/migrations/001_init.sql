-- Vendors, their API keys (stored hashed), orders with one row per ordered
-- service, and idempotency records. Times are Unix nanoseconds, UTC.
CREATE TABLE vendors (
	id               TEXT PRIMARY KEY,
	company_name     TEXT NOT NULL,
	environment      TEXT NOT NULL,
	status           TEXT NOT NULL,
	enabled_services TEXT NOT NULL,
	created_at       INTEGER NOT NULL
);

CREATE TABLE api_keys (
	id          TEXT PRIMARY KEY,
	vendor_id   TEXT NOT NULL REFERENCES vendors(id),
	hash        TEXT NOT NULL UNIQUE,
	prefix      TEXT NOT NULL,
	environment TEXT NOT NULL,
	created_at  INTEGER NOT NULL,
	expires_at  INTEGER NOT NULL,
	revoked_at  INTEGER
);
CREATE INDEX api_keys_vendor ON api_keys(vendor_id, created_at);

CREATE TABLE orders (
	id                 TEXT PRIMARY KEY,
	vendor_id          TEXT NOT NULL REFERENCES vendors(id),
	environment        TEXT NOT NULL,
	mc_number          TEXT NOT NULL,
	external_reference TEXT,
	driver             TEXT NOT NULL,
	created_at         INTEGER NOT NULL,
	status             TEXT NOT NULL,
	final              INTEGER NOT NULL,
	next_step_at       INTEGER
);
CREATE INDEX orders_vendor_created ON orders(vendor_id, created_at, id);
CREATE INDEX orders_next_step ON orders(next_step_at) WHERE next_step_at IS NOT NULL;
CREATE INDEX orders_unfinished ON orders(created_at) WHERE final = 0;

CREATE TABLE order_services (
	order_id     TEXT NOT NULL REFERENCES orders(id) ON DELETE CASCADE,
	position     INTEGER NOT NULL,
	service      TEXT NOT NULL,
	status       TEXT NOT NULL,
	reason       TEXT,
	state        TEXT,
	completed_at INTEGER,
	report_path  TEXT NOT NULL DEFAULT '',
	result       TEXT,
	steps        INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (order_id, service)
);

CREATE TABLE idempotency (
	vendor_id    TEXT NOT NULL,
	key          TEXT NOT NULL,
	request_hash TEXT NOT NULL,
	order_id     TEXT,
	created_at   INTEGER NOT NULL,
	PRIMARY KEY (vendor_id, key)
);

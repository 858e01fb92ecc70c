-- Key rotation: a key issued to replace another names it (rotated_from),
-- the replaced key names its successor (replaced_by) and when the rotation
-- revokes it, the end of the overlap (revoke_at, Unix nanoseconds).
ALTER TABLE api_keys ADD COLUMN rotated_from TEXT;
ALTER TABLE api_keys ADD COLUMN replaced_by TEXT;
ALTER TABLE api_keys ADD COLUMN revoke_at INTEGER;
CREATE INDEX api_keys_revoke_due ON api_keys(revoke_at) WHERE revoke_at IS NOT NULL AND revoked_at IS NULL;
-- Every vendor's keys by expiry: key list --expiring and the gauge of
-- vendors whose keys all expire soon.
CREATE INDEX api_keys_expires ON api_keys(expires_at) WHERE revoked_at IS NULL;

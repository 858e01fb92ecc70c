package gateway

import "vendorgate/shared/liblog"

// RedisLog routes go-redis's own log lines (redis.SetLogger: the library
// logs through one package-level logger) into slog; see liblog.Redis.
type RedisLog = liblog.Redis

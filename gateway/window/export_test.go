package window

import (
	"testing"
	"time"

	"vendorgate/shared/testredis"
)

// NewRedisOnClock is newRedisLimiter for the tests outside the package
// (invariant_test.go, which admits through package admission): a limiter
// on rs whose script takes the test's clock. Compiled into tests only.
func NewRedisOnClock(t testing.TB, rs *testredis.Server, now *time.Time) *Redis {
	return newRedisLimiter(t, rs, now)
}

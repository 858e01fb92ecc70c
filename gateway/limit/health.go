package limit

// Down reports whether the limiter's breaker is open: Redis is taken for
// unreachable and every call fails at once, so a caller that would only
// count something (the failed-key throttle) need not try.
func (r *Redis) Down() bool { return r.health.Open() }

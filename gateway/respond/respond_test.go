package respond

import (
	"testing"
	"time"
)

func TestRetryAfterSeconds(t *testing.T) {
	for d, want := range map[time.Duration]int64{0: 1, -time.Second: 1, time.Millisecond: 1, time.Second: 1,
		time.Second + time.Nanosecond: 2, 11500 * time.Millisecond: 12, time.Minute: 60} {
		if got := RetryAfterSeconds(d); got != want {
			t.Errorf("%s: %d, want %d", d, got, want)
		}
	}
}

package redisconn

import "testing"

func TestSlot(t *testing.T) {
	// Values from the Redis Cluster specification and CLUSTER KEYSLOT.
	for key, want := range map[string]uint16{"123456789": 0x31C3, "foo": 12182, "{user1000}.following": 3443,
		"{user1000}.followers": 3443, "foo{}{bar}": 8363, "foo{{bar}}zap": 4015, "foo{bar}{zap}": 5061} {
		if got := Slot(key); got != want%16384 {
			t.Errorf("Slot(%q) = %d, want %d", key, got, want%16384)
		}
	}
}

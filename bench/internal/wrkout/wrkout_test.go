package wrkout

import "testing"

func TestFields(t *testing.T) {
	v, err := Fields("Running 2s test\n  MARK requests=10 duration_us=2000000 status=1\n", "MARK")
	if err != nil || v["requests"] != 10 || v["duration_us"] != 2000000 || v["status"] != 1 {
		t.Fatalf("%v %v", v, err)
	}
	for _, bad := range []string{"", "MARK requests=x duration_us=1", "MARK requests=1", "OTHER duration_us=5"} {
		if _, err := Fields(bad, "MARK"); err == nil {
			t.Errorf("Fields(%q) accepted", bad)
		}
	}
}

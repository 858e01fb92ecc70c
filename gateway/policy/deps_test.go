package policy

import (
	"os/exec"
	"strings"
	"testing"
)

// The packages that name buckets and count by policy (auth, usage) need
// the table, not the limiter, and the table needs no Redis client: a change
// to how a check is decided cannot reach them. (auth hears of revoked keys
// over Redis pub/sub, which is its own job.)
func TestTableUsersNeedNoLimiter(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Fatal("the go command is needed to list imports:", err)
	}
	for _, pkg := range []string{"vendorgate/gateway/policy", "vendorgate/gateway/auth", "vendorgate/gateway/usage"} {
		out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			limiter := dep == "vendorgate/gateway/limit" || strings.HasPrefix(dep, "vendorgate/gateway/limit/")
			if limiter || (pkg == "vendorgate/gateway/policy" && strings.HasPrefix(dep, "github.com/redis/")) {
				t.Errorf("%s imports %s", pkg, dep)
			}
		}
	}
}

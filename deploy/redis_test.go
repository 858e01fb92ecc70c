package deploy

import (
	"strings"
	"testing"
	"time"

	"vendorgate/shared/testredis"
)

// shippedRedisArgs are the redis-server arguments of the compose stack's
// Redis and of the Kubernetes base's.
func shippedRedisArgs(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	var compose []string
	for _, a := range asList(dig(yamlDoc(t, "docker-compose.yml"), "services", "redis", "command")) {
		compose = append(compose, str(a))
	}
	if len(compose) == 0 || compose[0] != "redis-server" {
		t.Fatalf("docker-compose.yml: redis command %q, want redis-server and its arguments", compose)
	}
	out["docker-compose.yml"] = compose[1:]
	dep := k8sFind(k8sObjects(t), "Deployment", "vendorgate-redis")
	for _, c := range asList(dig(dep, "spec", "template", "spec", "containers")) {
		if str(asMap(c)["name"]) != "redis" {
			continue
		}
		var args []string
		for _, a := range asList(asMap(c)["args"]) {
			args = append(args, str(a))
		}
		out["k8s/base/redis.yaml"] = args
	}
	if len(out["k8s/base/redis.yaml"]) == 0 {
		t.Fatal("k8s/base/redis.yaml: no redis container with arguments")
	}
	return out
}

// argValue is the value given to a redis-server option (the last wins, as
// in redis-server).
func argValue(args []string, opt string) string {
	v := ""
	for i := 0; i+1 < len(args); i++ {
		if args[i] == opt {
			v = args[i+1]
		}
	}
	return v
}

// The shipped Redis keeps the quota counters through a crash
// (docs/limits.md, "When Redis loses its data"): AOF, fsynced every second,
// on a volume that outlives the container (compose) or the pod (a
// PersistentVolumeClaim); evicting only keys with a TTL, so the data
// marker stays. And from outside: a redis-server run with each file's
// arguments, killed with SIGKILL after its AOF was written, comes back
// with a quota counter it held (with the arguments shipped before,
// `--appendonly no`, it came back empty).
func TestShippedRedisKeepsQuotas(t *testing.T) {
	for file, args := range shippedRedisArgs(t) {
		if v := argValue(args, "--appendonly"); v != "yes" {
			t.Errorf("%s: --appendonly %q, want yes", file, v)
		}
		if v := argValue(args, "--appendfsync"); v != "everysec" {
			t.Errorf("%s: --appendfsync %q, want everysec", file, v)
		}
		if v := argValue(args, "--maxmemory-policy"); !strings.HasPrefix(v, "volatile-") {
			t.Errorf("%s: --maxmemory-policy %q, want a volatile-* policy (the data marker has no TTL)", file, v)
		}
	}
	var vols []string
	for _, v := range asList(dig(yamlDoc(t, "docker-compose.yml"), "services", "redis", "volumes")) {
		vols = append(vols, str(v))
	}
	if len(vols) != 1 || !strings.HasSuffix(vols[0], ":/data") || strings.HasPrefix(vols[0], "/") || strings.HasPrefix(vols[0], ".") {
		t.Errorf("docker-compose.yml: redis volumes %q, want one named volume on /data", vols)
	}
	objs := k8sObjects(t)
	dep := k8sFind(objs, "Deployment", "vendorgate-redis")
	claim := ""
	for _, v := range asList(dig(dep, "spec", "template", "spec", "volumes")) {
		if str(asMap(v)["name"]) == "data" {
			claim = str(dig(v, "persistentVolumeClaim", "claimName"))
		}
	}
	if claim == "" || k8sFind(objs, "PersistentVolumeClaim", claim) == nil {
		t.Errorf("k8s/base/redis.yaml: the data volume is not a PersistentVolumeClaim of the base (%q)", claim)
	}
	if s := str(dig(dep, "spec", "strategy", "type")); s != "Recreate" {
		t.Errorf("k8s/base/redis.yaml: strategy %q, want Recreate (one pod at a time on its RWO volume)", s)
	}

	for file, args := range shippedRedisArgs(t) {
		t.Run(file, func(t *testing.T) {
			srv, err := testredis.Run(testredis.Options{Dir: t.TempDir(), Args: args})
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			const key = "win:vg:{v:v1}:orders-month:q1775001600"
			srv.Do(t, "SET", key, "17")
			srv.Do(t, "PEXPIRE", key, "2678400000")
			// The AOF rewritten and fsynced: the write is on disk, as
			// everysec has it within a second.
			srv.Do(t, "BGREWRITEAOF")
			deadline := time.Now().Add(10 * time.Second)
			for {
				info := srv.Do(t, "INFO", "persistence")
				if strings.Contains(info, "aof_rewrite_in_progress:0") && strings.Contains(info, "aof_rewrite_scheduled:0") &&
					strings.Contains(info, "aof_last_bgrewrite_status:ok") {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the AOF rewrite did not end: %s", info)
				}
				time.Sleep(10 * time.Millisecond)
			}
			srv.Restart(t) // SIGKILL, and the same arguments and folder again
			if v := srv.Do(t, "GET", key); !strings.Contains(v, "17") {
				t.Fatalf("after a crash the quota counter is %q, want 17", v)
			}
		})
	}
}

package deploy

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// The usage view (/usage on a gateway's admin listener, `vendorctl usage`)
// is on in every shipped deployment: each gateway has an admin token from
// a secret of its own, vendorctl is given the same one and a gateway's
// admin address, and deploy/README.md says how to reach it.
func TestUsageViewIsWired(t *testing.T) {
	required := regexp.MustCompile(`^\$\{([A-Z0-9_]+):\?[^}]+\}$`)
	for _, file := range []string{"docker-compose.yml", scaleOutCompose} {
		t.Run(file, func(t *testing.T) {
			services := asMap(yamlDoc(t, file)["services"])
			gwVars := map[string]bool{}
			for _, gw := range []string{"gateway-1", "gateway-2"} {
				v := str(composeRawEnv(asMap(services[gw]))["GATEWAY_ADMIN_TOKEN"])
				m := required.FindStringSubmatch(v)
				if m == nil {
					t.Errorf("%s GATEWAY_ADMIN_TOKEN = %q: want ${VAR:?message}, so the usage view is on", gw, v)
					continue
				}
				gwVars[m[1]] = true
			}
			ctl := composeRawEnv(asMap(services["vendorctl"]))
			m := required.FindStringSubmatch(str(ctl["VENDORCTL_GATEWAY_ADMIN_TOKEN"]))
			if m == nil || len(gwVars) != 1 || !gwVars[m[1]] {
				t.Errorf("vendorctl VENDORCTL_GATEWAY_ADMIN_TOKEN = %q, gateways' variables %v: want the one variable of the gateways",
					str(ctl["VENDORCTL_GATEWAY_ADMIN_TOKEN"]), gwVars)
			}
			if backend := str(composeRawEnv(asMap(services["vendorctl"]))["VENDORCTL_ADMIN_TOKEN"]); m != nil && strings.Contains(backend, m[1]+":") {
				t.Errorf("the gateway's admin token comes from the backend's admin token variable %s: give it its own", m[1])
			}
			admin := composeEnv(asMap(services["gateway-1"]))["GATEWAY_ADMIN_LISTEN"]
			want := fmt.Sprintf("http://gateway-1:%d", portOf(t, admin))
			if got := str(ctl["VENDORCTL_GATEWAY_ADMIN_URL"]); got != want {
				t.Errorf("vendorctl VENDORCTL_GATEWAY_ADMIN_URL = %q, want %q (a gateway's admin listener)", got, want)
			}
		})
	}

	objs := k8sObjects(t)
	gw := asMap(k8sFind(objs, "Deployment", "vendorgate-gateway"))
	found := false
	for _, c := range asList(dig(gw, "spec", "template", "spec", "containers")) {
		for _, e := range asList(asMap(c)["env"]) {
			if str(asMap(e)["name"]) != "GATEWAY_ADMIN_TOKEN" {
				continue
			}
			ref := asMap(dig(e, "valueFrom", "secretKeyRef"))
			secret := asMap(k8sFind(objs, "Secret", str(ref["name"])))
			if _, ok := asMap(secret["stringData"])[str(ref["key"])]; !ok || str(ref["key"]) == "admin-token" {
				t.Errorf("k8s gateway GATEWAY_ADMIN_TOKEN reads Secret %q key %q: want a key of its own that the Secret defines", str(ref["name"]), str(ref["key"]))
			}
			found = true
		}
	}
	if !found {
		t.Error("the k8s gateway Deployment does not set GATEWAY_ADMIN_TOKEN from a Secret")
	}

	if _, ok := envFileNames(t, "systemd/gateway.env.example")["GATEWAY_ADMIN_TOKEN"]; !ok {
		t.Error("systemd/gateway.env.example does not set GATEWAY_ADMIN_TOKEN")
	}
	if _, ok := envFileNames(t, ".env.example")["VENDORGATE_GATEWAY_ADMIN_TOKEN"]; !ok {
		t.Error(".env.example does not list VENDORGATE_GATEWAY_ADMIN_TOKEN")
	}

	readme := string(readFile(t, "README.md"))
	for _, want := range []string{"VENDORCTL_GATEWAY_ADMIN_TOKEN", "VENDORCTL_GATEWAY_ADMIN_URL", "vendorctl usage top", "port-forward"} {
		if !strings.Contains(readme, want) {
			t.Errorf("deploy/README.md never mentions %q: say how to reach the usage view", want)
		}
	}
}

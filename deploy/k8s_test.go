package deploy

import (
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

type k8sObject struct {
	file string
	doc  map[string]any
}

func (o k8sObject) kind() string { return str(o.doc["kind"]) }
func (o k8sObject) name() string { return str(dig(o.doc, "metadata", "name")) }

// k8sObjects are the manifests' objects (the kustomization excluded).
func k8sObjects(t *testing.T) []k8sObject {
	t.Helper()
	var out []k8sObject
	for _, p := range files(t, ".yaml") {
		if !strings.HasPrefix(p, "k8s/base/") || filepath.Base(p) == "kustomization.yaml" {
			continue
		}
		for _, d := range yamlDocs(t, p) {
			out = append(out, k8sObject{p, asMap(d)})
		}
	}
	if len(out) < 8 {
		t.Fatalf("found only %d Kubernetes objects", len(out))
	}
	return out
}

func k8sFind(objs []k8sObject, kind, name string) map[string]any {
	for _, o := range objs {
		if o.kind() == kind && o.name() == name {
			return o.doc
		}
	}
	return nil
}

// container is one container of a Deployment, with its pod.
type container struct {
	where, image string
	spec         map[string]any // the container
	pod          map[string]any // the pod spec
	deployment   map[string]any
}

func k8sContainers(t *testing.T) []container {
	t.Helper()
	var out []container
	for _, o := range k8sObjects(t) {
		if o.kind() != "Deployment" {
			continue
		}
		pod := asMap(dig(o.doc, "spec", "template", "spec"))
		for _, c := range asList(pod["containers"]) {
			c := asMap(c)
			out = append(out, container{o.file + " " + o.name() + "/" + str(c["name"]), str(c["image"]), c, pod, o.doc})
		}
	}
	return out
}

// containerPort resolves a probe's or Service's port (number or name).
func containerPort(c map[string]any, port any) int {
	if n, err := strconv.Atoi(str(port)); err == nil {
		return n
	}
	for _, p := range asList(c["ports"]) {
		if str(asMap(p)["name"]) == str(port) {
			n, _ := strconv.Atoi(str(asMap(p)["containerPort"]))
			return n
		}
	}
	return 0
}

// containerEnv is the container's environment; secrets read as dummyToken.
func containerEnv(t *testing.T, objs []k8sObject, c container) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, e := range asList(c.spec["env"]) {
		e := asMap(e)
		name := str(e["name"])
		switch {
		case e["value"] != nil:
			env[name] = str(e["value"])
		case dig(e, "valueFrom", "secretKeyRef") != nil:
			env[name] = dummySecret(name)
		case dig(e, "valueFrom", "configMapKeyRef") != nil:
			ref := asMap(dig(e, "valueFrom", "configMapKeyRef"))
			env[name] = str(dig(k8sFind(objs, "ConfigMap", str(ref["name"])), "data", str(ref["key"])))
		}
	}
	return env
}

// mountedConfig returns the text of the file a container's -config flag
// names, read from the ConfigMap mounted there.
func mountedConfig(t *testing.T, objs []k8sObject, c container) string {
	t.Helper()
	file := flagValue(asList(c.spec["args"]), "-config")
	if file == "" {
		t.Fatalf("%s: no -config argument", c.where)
	}
	for _, m := range asList(c.spec["volumeMounts"]) {
		m := asMap(m)
		mount := str(m["mountPath"])
		if path.Dir(file) != mount {
			continue
		}
		for _, v := range asList(c.pod["volumes"]) {
			v := asMap(v)
			if str(v["name"]) != str(m["name"]) || v["configMap"] == nil {
				continue
			}
			cm := asMap(v["configMap"])
			key := path.Base(file)
			for _, it := range asList(cm["items"]) {
				if str(asMap(it)["path"]) == path.Base(file) {
					key = str(asMap(it)["key"])
				}
			}
			data := asMap(dig(k8sFind(objs, "ConfigMap", str(cm["name"])), "data"))
			text, ok := data[key]
			if !ok {
				t.Fatalf("%s: ConfigMap %s has no key %s for %s", c.where, str(cm["name"]), key, file)
			}
			return str(text)
		}
	}
	t.Fatalf("%s: -config %s is not in a mounted ConfigMap", c.where, file)
	return ""
}

func labelsMatch(selector, labels map[string]any) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if str(labels[k]) != str(v) {
			return false
		}
	}
	return true
}

// Every object is namespaced, named and listed in the kustomization, which
// kubectl can build when it is installed.
func TestK8sObjects(t *testing.T) {
	objs := k8sObjects(t)
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.kind()]++
		if str(o.doc["apiVersion"]) == "" || o.kind() == "" || o.name() == "" {
			t.Errorf("%s: object without apiVersion, kind or name: %v", o.file, o.doc["metadata"])
		}
		if ns := str(dig(o.doc, "metadata", "namespace")); o.kind() != "Namespace" && ns != "vendorgate" {
			t.Errorf("%s %s/%s: namespace %q, want vendorgate", o.file, o.kind(), o.name(), ns)
		}
	}
	for _, k := range []string{"Namespace", "ConfigMap", "Secret", "Deployment", "Service", "PodDisruptionBudget", "HorizontalPodAutoscaler"} {
		if kinds[k] == 0 {
			t.Errorf("no %s", k)
		}
	}

	kust := yamlDoc(t, "k8s/base/kustomization.yaml")
	listed := map[string]bool{}
	for _, r := range asList(kust["resources"]) {
		listed["k8s/base/"+str(r)] = true
	}
	for _, p := range files(t, ".yaml") {
		if strings.HasPrefix(p, "k8s/base/") && filepath.Base(p) != "kustomization.yaml" && !listed[p] {
			t.Errorf("%s is not in kustomization.yaml resources", p)
		}
	}
	for p := range listed {
		if _, err := yamlDocsErr(p); err != nil {
			t.Errorf("kustomization.yaml lists %s: %v", p, err)
		}
	}

	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Log("kubectl not on PATH: kustomize build not checked")
		return
	}
	out, err := exec.Command(kubectl, "kustomize", "k8s").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl kustomize k8s: %v\n%s", err, out)
	}
	built, err := decodeYAMLDocs(out)
	if err != nil || len(built) != len(objs) {
		t.Errorf("kustomize built %d objects (%v), the files hold %d", len(built), err, len(objs))
	}
}

func yamlDocsErr(p string) ([]any, error) {
	b, err := readFileErr(p)
	if err != nil {
		return nil, err
	}
	return decodeYAMLDocs(b)
}

// Deployments: non-root, read-only root, bounded resources; vendorgate
// containers listen where their ports, probes and scrape annotations say,
// get their tokens from the Secret, and outlive their own shutdown grace.
func TestK8sWorkloads(t *testing.T) {
	objs := k8sObjects(t)
	secretData := map[string]map[string]any{}
	for _, o := range objs {
		if o.kind() == "Secret" {
			secretData[o.name()] = map[string]any{}
			for _, field := range []string{"stringData", "data"} {
				for k, v := range asMap(o.doc[field]) {
					secretData[o.name()][k] = v
				}
			}
		}
	}
	seen := map[string]bool{}
	for _, c := range k8sContainers(t) {
		t.Run(c.where, func(t *testing.T) {
			psc, csc := asMap(c.pod["securityContext"]), asMap(c.spec["securityContext"])
			if str(psc["runAsNonRoot"]) != "true" && str(csc["runAsNonRoot"]) != "true" {
				t.Error("runAsNonRoot is not true")
			}
			if uid := str(psc["runAsUser"]) + str(csc["runAsUser"]); uid == "0" {
				t.Error("runs as uid 0")
			}
			if str(csc["readOnlyRootFilesystem"]) != "true" {
				t.Error("readOnlyRootFilesystem is not true")
			}
			if str(csc["allowPrivilegeEscalation"]) != "false" {
				t.Error("allowPrivilegeEscalation is not false")
			}
			if caps := asList(dig(csc, "capabilities", "drop")); len(caps) == 0 || str(caps[0]) != "ALL" {
				t.Error("capabilities are not dropped (drop: [ALL])")
			}
			for _, kind := range []string{"requests", "limits"} {
				for _, res := range []string{"cpu", "memory"} {
					if str(dig(c.spec, "resources", kind, res)) == "" {
						t.Errorf("no resources.%s.%s", kind, res)
					}
				}
			}
			tmpl := asMap(dig(c.deployment, "spec", "template", "metadata", "labels"))
			if !labelsMatch(asMap(dig(c.deployment, "spec", "selector", "matchLabels")), tmpl) {
				t.Error("the Deployment's selector does not match its pod labels")
			}
			if str(c.pod["automountServiceAccountToken"]) != "false" {
				t.Error("automountServiceAccountToken is not false (no vendorgate pod talks to the API server)")
			}

			bin := binary(c.image)
			if bin == "" {
				return
			}
			seen[bin] = true
			if str(c.pod["enableServiceLinks"]) != "false" {
				t.Error("enableServiceLinks is not false: Service variables would land in the binary's environment")
			}
			text := mountedConfig(t, objs, c)
			cfg := map[string]any{}
			if err := yaml.Unmarshal([]byte(text), &cfg); err != nil {
				t.Fatalf("config: %v", err)
			}
			for _, k := range secretKeys {
				if _, ok := cfg[k]; ok {
					t.Errorf("the ConfigMap's %s.yaml holds %s: tokens belong in the Secret", bin, k)
				}
			}
			env := containerEnv(t, objs, c)
			eff := loadConfig(t, bin, []byte(text), env)
			for _, addr := range []string{eff.listen, eff.admin} {
				if !reachable(t, addr) {
					t.Errorf("listens on %s: the kubelet and the Service cannot reach it", addr)
				}
			}
			listen, admin := portOf(t, eff.listen), portOf(t, eff.admin)

			var declared []int
			for _, p := range asList(c.spec["ports"]) {
				n, _ := strconv.Atoi(str(asMap(p)["containerPort"]))
				declared = append(declared, n)
			}
			sort.Ints(declared)
			if want := []int{min(listen, admin), max(listen, admin)}; len(declared) != 2 || declared[0] != want[0] || declared[1] != want[1] {
				t.Errorf("containerPorts %v, but it listens on %d and %d", declared, listen, admin)
			}
			// A gateway's readiness leaves out the dependencies every replica
			// shares (docs/operating.md, "Readiness"); a backend's checks its database.
			ready := "/readyz"
			if bin == "gateway" {
				ready = LBReadyzPath
			}
			for probe, want := range map[string]string{"readinessProbe": ready, "livenessProbe": "/healthz"} {
				get := asMap(dig(c.spec, probe, "httpGet"))
				if str(get["path"]) != want {
					t.Errorf("%s path %q, want %s", probe, str(get["path"]), want)
				}
				if p := containerPort(c.spec, get["port"]); p != admin {
					t.Errorf("%s port %v is %d, want the admin port %d", probe, get["port"], p, admin)
				}
			}
			ann := asMap(dig(c.deployment, "spec", "template", "metadata", "annotations"))
			if p, _ := strconv.Atoi(str(ann["prometheus.io/port"])); p != admin {
				t.Errorf("prometheus.io/port %q, want the admin port %d", str(ann["prometheus.io/port"]), admin)
			}

			grace, _ := strconv.ParseFloat(str(c.pod["terminationGracePeriodSeconds"]), 64)
			sleep, _ := strconv.ParseFloat(str(dig(c.spec, "lifecycle", "preStop", "sleep", "seconds")), 64)
			if grace <= eff.grace+sleep {
				t.Errorf("terminationGracePeriodSeconds %v must exceed shutdown_grace %vs + preStop sleep %vs", grace, eff.grace, sleep)
			}

			tokens := map[string][]string{"gateway": {"GATEWAY_INTERNAL_TOKEN", "GATEWAY_KEY_SIGNING_SECRETS"},
				"backend": {"BACKEND_INTERNAL_TOKEN", "BACKEND_KEY_SIGNING_SECRETS", "BACKEND_ADMIN_TOKEN"}}[bin]
			for _, tok := range tokens {
				var ref map[string]any
				for _, e := range asList(c.spec["env"]) {
					if str(asMap(e)["name"]) == tok {
						ref = asMap(dig(e, "valueFrom", "secretKeyRef"))
					}
				}
				if ref == nil {
					t.Errorf("%s does not come from a secretKeyRef", tok)
					continue
				}
				keys, ok := secretData[str(ref["name"])]
				if _, has := keys[str(ref["key"])]; !ok || !has {
					t.Errorf("%s reads Secret %s key %s, which the manifests do not define", tok, str(ref["name"]), str(ref["key"]))
				}
			}

			if bin == "gateway" {
				if r, _ := strconv.Atoi(str(dig(c.deployment, "spec", "replicas"))); r < 2 {
					t.Errorf("gateway replicas %d, want 2 or more", r)
				}
				checkURLsPointAtServices(t, objs, cfg)
			}
			if bin == "backend" {
				checkURLsPointAtServices(t, objs, cfg)
			}
		})
	}
	for _, b := range []string{"gateway", "backend"} {
		if !seen[b] {
			t.Errorf("no Deployment runs the %s image", b)
		}
	}
}

// checkURLsPointAtServices: the backend and Redis URLs of a configuration
// name Services whose port reaches the right container port.
func checkURLsPointAtServices(t *testing.T, objs []k8sObject, cfg map[string]any) {
	t.Helper()
	var urls []string
	for _, k := range []string{"backend_url", "redis_url"} {
		if s := str(cfg[k]); s != "" {
			urls = append(urls, s)
		}
	}
	if s := str(dig(cfg, "redis", "url")); s != "" {
		urls = append(urls, s)
	}
	if len(urls) == 0 {
		t.Error("the configuration names no backend or Redis URL")
	}
	for _, u := range urls {
		rest := u[strings.Index(u, "://")+3:]
		hostport, _, _ := strings.Cut(rest, "/")
		host, port, _ := strings.Cut(hostport, ":")
		svc := k8sFind(objs, "Service", host)
		if svc == nil {
			t.Errorf("%s: no Service %s", u, host)
			continue
		}
		target := serviceTarget(t, objs, svc, port)
		if target == 0 {
			t.Errorf("%s: Service %s has no port %s reaching a container port", u, host, port)
			continue
		}
		if strings.HasPrefix(u, "http") {
			// The gateway must reach the backend's main listener, not admin.
			for _, c := range k8sContainers(t) {
				if binary(c.image) == "backend" && labelsMatch(asMap(dig(svc, "spec", "selector")), asMap(dig(c.deployment, "spec", "template", "metadata", "labels"))) {
					eff := loadConfig(t, "backend", []byte(mountedConfig(t, objs, c)), containerEnv(t, objs, c))
					if target != portOf(t, eff.listen) {
						t.Errorf("%s reaches container port %d, the backend's main listener is %s", u, target, eff.listen)
					}
				}
			}
		} else if target != 6379 {
			t.Errorf("%s reaches container port %d, not Redis' 6379", u, target)
		}
	}
}

// serviceTarget is the container port a Service's port reaches, 0 if none.
func serviceTarget(t *testing.T, objs []k8sObject, svc map[string]any, port string) int {
	t.Helper()
	sel := asMap(dig(svc, "spec", "selector"))
	for _, p := range asList(dig(svc, "spec", "ports")) {
		p := asMap(p)
		if str(p["port"]) != port {
			continue
		}
		tp := p["targetPort"]
		if tp == nil {
			tp = p["port"]
		}
		for _, c := range k8sContainers(t) {
			if labelsMatch(sel, asMap(dig(c.deployment, "spec", "template", "metadata", "labels"))) {
				if n := containerPort(c.spec, tp); n != 0 {
					for _, cp := range asList(c.spec["ports"]) {
						if str(asMap(cp)["containerPort"]) == strconv.Itoa(n) {
							return n
						}
					}
				}
			}
		}
	}
	return 0
}

// Services select pods and reach declared container ports; the gateway's
// public Service does not publish the admin port.
func TestK8sServices(t *testing.T) {
	objs := k8sObjects(t)
	for _, o := range objs {
		if o.kind() != "Service" {
			continue
		}
		for _, p := range asList(dig(o.doc, "spec", "ports")) {
			port := str(asMap(p)["port"])
			if serviceTarget(t, objs, o.doc, port) == 0 {
				t.Errorf("Service %s port %s reaches no declared container port of its pods", o.name(), port)
			}
		}
	}
	gw := k8sFind(objs, "Service", "vendorgate-gateway")
	if gw == nil {
		t.Fatal("no vendorgate-gateway Service")
	}
	for _, p := range asList(dig(gw, "spec", "ports")) {
		if target := serviceTarget(t, objs, gw, str(asMap(p)["port"])); target == 9090 {
			t.Error("the gateway Service publishes the admin port 9090")
		}
	}
}

// The gateway has a PodDisruptionBudget and an autoscaling/v2 HPA that
// keep at least two replicas.
func TestK8sDisruptionAndScaling(t *testing.T) {
	objs := k8sObjects(t)
	dep := k8sFind(objs, "Deployment", "vendorgate-gateway")
	if dep == nil {
		t.Fatal("no vendorgate-gateway Deployment")
	}
	labels := asMap(dig(dep, "spec", "template", "metadata", "labels"))
	pdbs, hpas := 0, 0
	for _, o := range objs {
		switch o.kind() {
		case "PodDisruptionBudget":
			if !labelsMatch(asMap(dig(o.doc, "spec", "selector", "matchLabels")), labels) {
				continue
			}
			pdbs++
			if v := str(o.doc["apiVersion"]); v != "policy/v1" {
				t.Errorf("PodDisruptionBudget %s: apiVersion %s, want policy/v1", o.name(), v)
			}
			if dig(o.doc, "spec", "minAvailable") == nil && dig(o.doc, "spec", "maxUnavailable") == nil {
				t.Errorf("PodDisruptionBudget %s sets neither minAvailable nor maxUnavailable", o.name())
			}
		case "HorizontalPodAutoscaler":
			ref := asMap(dig(o.doc, "spec", "scaleTargetRef"))
			if str(ref["kind"]) != "Deployment" || str(ref["name"]) != "vendorgate-gateway" {
				continue
			}
			hpas++
			if v := str(o.doc["apiVersion"]); v != "autoscaling/v2" {
				t.Errorf("HPA %s: apiVersion %s, want autoscaling/v2", o.name(), v)
			}
			lo, _ := strconv.Atoi(str(dig(o.doc, "spec", "minReplicas")))
			hi, _ := strconv.Atoi(str(dig(o.doc, "spec", "maxReplicas")))
			if lo < 2 || hi < lo {
				t.Errorf("HPA %s: minReplicas %d, maxReplicas %d; want 2 <= min <= max", o.name(), lo, hi)
			}
			if len(asList(dig(o.doc, "spec", "metrics"))) == 0 {
				t.Errorf("HPA %s has no metrics", o.name())
			}
		}
	}
	if pdbs != 1 || hpas != 1 {
		t.Errorf("gateway has %d PodDisruptionBudgets and %d HPAs, want one each", pdbs, hpas)
	}
}

// The Secret's placeholders cannot be deployed by mistake: they are too
// short for the binaries, which then refuse to start.
func TestK8sSecretPlaceholders(t *testing.T) {
	for _, o := range k8sObjects(t) {
		if o.kind() != "Secret" {
			continue
		}
		if len(asMap(o.doc["data"])) > 0 {
			t.Errorf("Secret %s has base64 data: keep placeholders in stringData", o.name())
		}
		for k, v := range asMap(o.doc["stringData"]) {
			if s := str(v); len(s) >= 16 || !strings.Contains(s, "REPLACE") {
				t.Errorf("Secret %s key %s = %q: want a REPLACE... placeholder shorter than 16 characters", o.name(), k, s)
			}
		}
	}
}

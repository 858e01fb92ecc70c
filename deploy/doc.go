// Package deploy holds vendorgate's deployment files (Dockerfiles,
// docker-compose, Kubernetes manifests, systemd units, Prometheus rules, the
// Grafana dashboard) and the tests that keep them consistent with the code:
// every file parses, every metric an alert or panel queries is one the
// gateway or backend exports, every environment variable is a real setting,
// and every port, probe and listener agrees across the files.
package deploy

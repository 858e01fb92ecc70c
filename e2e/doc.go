// Package e2e holds the end-to-end tests: they build the real binaries,
// start a real redis-server, backend and gateway on free loopback ports,
// drive them with vendorctl and plain HTTP, and read what a vendor reads.
package e2e

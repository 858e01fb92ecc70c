// Package e2e holds the end-to-end tests: they build the real binaries,
// start a real redis-server, backend and gateway on free loopback ports,
// drive them with vendorctl and plain HTTP, and read what a vendor reads.
//
// Each test starts a stack of its own (its ports, Redis, database and
// temporary directories), so the tests run in parallel (t.Parallel). A test
// that asserts a time bound or a resource measure under a load of its own
// runs alone and says why in a "Not parallel:" line at its top.
package e2e

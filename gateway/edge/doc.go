// Package edge is the gateway's doorway: the listeners a client's bytes
// arrive on, and what guards them before a request is read. It owns the
// public listener (plain HTTP or TLS), the admin listener and the optional
// plain-HTTP listener (http_listen), the fasthttp servers' sizes and
// timeouts, the PROXY header of a trusted proxy's connection, the per-peer
// and total connection bounds, the certificates and their metrics, and
// serving and draining. It answers no request itself: the gateway hands it
// its handlers (Options), as a reverse proxy's handler is kept apart from
// the server and certificate manager that feed it.
//
// Which file does what:
//
//   - server.go: Options, New (the servers and their sizes), Serve,
//     ServePlain, Shutdown, Close; the public listener's chain of guards
//     (publicListener).
//   - servers.go: the listener sizes and timeouts no setting names.
//   - tls.go: the public listener's TLS: the certificate store, the file
//     watcher and SIGHUP reload, the ACME hooks, the certificate and
//     handshake metrics, the handshake budget's wiring.
//   - certs.go: the certificates read from files (Store), their reload and
//     the names they must keep covering; CheckCertificates for -check.
//   - tlslistener.go: the TLS listener whose connections count failed
//     handshakes by reason (Reason) instead of logging each one.
//   - budget.go: the handshake budget (tls.max_handshakes and
//     tls.max_handshakes_per_second).
//   - acme.go: certificates obtained and renewed over ACME (CertMagic).
//   - proxyprotocol.go: the PROXY header (v1, v2) read at accept.
//   - keyless.go: the shorter idle time of a connection that has shown no
//     valid key (ShownKey marks one that has).
//   - readahead.go: a plain-HTTP connection's wait for its next request
//     made one read of the socket, its buffer held only while it holds
//     bytes.
package edge

// Package hoptls is the TLS of the internal hop, the gateway's calls to the
// backend: the gateway's client side (the backend's CA, an optional client
// certificate for mutual TLS) and the backend's server side (its certificate,
// an optional CA whose client certificates it requires). Files are read once,
// at start; every error names the file and what is wrong with it.
package hoptls

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"
)

// ClientFiles are the gateway's side of the hop.
type ClientFiles struct {
	// CAFile is a PEM file of the CAs that sign the backend's certificate;
	// empty: the system's roots.
	CAFile string
	// CertFile and KeyFile are a PEM client certificate (leaf first) and
	// its key, shown to a backend that requires one; empty: none.
	CertFile, KeyFile string
}

// Set reports whether any file is named.
func (f ClientFiles) Set() bool { return f.CAFile != "" || f.CertFile != "" || f.KeyFile != "" }

// ClientConfig reads f into a client configuration for the backend's
// HostClients; nil (the system's roots, no client certificate) when no file
// is named. The server name is left to each HostClient (the backend URL's
// host).
func ClientConfig(f ClientFiles) (*tls.Config, error) {
	if !f.Set() {
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.CAFile != "" {
		pool, err := readPool(f.CAFile)
		if err != nil {
			return nil, fmt.Errorf("ca_file %w", err)
		}
		c.RootCAs = pool
	}
	if f.CertFile != "" || f.KeyFile != "" {
		cert, err := readPair(f.CertFile, f.KeyFile)
		if err != nil {
			return nil, err
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// ServerFiles are the backend's side of the hop.
type ServerFiles struct {
	// CertFile and KeyFile are the backend's PEM certificate (leaf first)
	// and key. Both empty: the listener is plain TCP.
	CertFile, KeyFile string
	// ClientCAFile, when set, is a PEM file of the CAs whose client
	// certificates are required: a client without one signed by them is
	// refused in the handshake.
	ClientCAFile string
}

// Enabled reports whether the listener serves TLS.
func (f ServerFiles) Enabled() bool { return f.CertFile != "" || f.KeyFile != "" }

// ServerConfig reads f into a server configuration; nil when TLS is off.
func ServerConfig(f ServerFiles) (*tls.Config, error) {
	if !f.Enabled() {
		if f.ClientCAFile != "" {
			return nil, fmt.Errorf("client_ca_file %s needs cert_file and key_file: client certificates are asked for in a TLS handshake", f.ClientCAFile)
		}
		return nil, nil
	}
	cert, err := readPair(f.CertFile, f.KeyFile)
	if err != nil {
		return nil, err
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}}
	if f.ClientCAFile != "" {
		pool, err := readPool(f.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("client_ca_file %w", err)
		}
		c.ClientCAs, c.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return c, nil
}

func readPool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, unwrapPath(err))
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no PEM certificate in it", path)
	}
	return pool, nil
}

func readPair(certFile, keyFile string) (tls.Certificate, error) {
	switch {
	case certFile == "":
		return tls.Certificate{}, fmt.Errorf("key_file %s has no certificate: set cert_file", keyFile)
	case keyFile == "":
		return tls.Certificate{}, fmt.Errorf("cert_file %s has no key: set key_file", certFile)
	}
	for _, p := range []struct{ name, path string }{{"cert_file", certFile}, {"key_file", keyFile}} {
		if _, err := os.ReadFile(p.path); err != nil {
			return tls.Certificate{}, fmt.Errorf("%s %s: %w", p.name, p.path, unwrapPath(err))
		}
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("cert_file %s and key_file %s: %w", certFile, keyFile, err)
	}
	return cert, nil
}

// unwrapPath drops the path an *os.PathError repeats.
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// Explain adds to a failed call's error what to change when the failure is
// the hop's TLS: the backend's certificate not trusted (backend_tls.ca_file),
// or the backend refusing the gateway's (backend_tls.cert_file). Other
// errors are returned as they are.
func Explain(err error) error {
	if err == nil {
		return nil
	}
	var unknown x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var verify *tls.CertificateVerificationError
	switch {
	case errors.As(err, &unknown), errors.As(err, &verify) && !errors.As(err, &hostname):
		return fmt.Errorf("%w (the backend's certificate is not trusted: set backend_tls.ca_file to the CA that signed it)", err)
	case errors.As(err, &hostname):
		return fmt.Errorf("%w (the backend's certificate does not name the host of backend_url)", err)
	}
	s := err.Error()
	if strings.Contains(s, "tls: certificate required") || strings.Contains(s, "tls: bad certificate") ||
		strings.Contains(s, "tls: unknown certificate authority") {
		return fmt.Errorf("%w (the backend refused this gateway's client certificate: set backend_tls.cert_file and key_file to one its tls.client_ca_file trusts)", err)
	}
	if strings.Contains(s, "tls: first record does not look like a TLS handshake") {
		return fmt.Errorf("%w (the backend does not serve TLS: use an http:// backend_url or set the backend's tls.cert_file)", err)
	}
	return err
}

// Diagnose finds why an https backend at addr closed a connection before
// its first answer byte, which is all an HTTP client reports when a TLS 1.3
// server refuses the client's certificate (the refusal comes after the
// client's handshake has finished): it makes a connection of its own with
// tc and reads, within timeout, what the server sends unasked. The error
// returned is the TLS refusal, or nil when there was none to see (the
// server said nothing, or the connection could not be made).
func Diagnose(addr string, tc *tls.Config, timeout time.Duration) error {
	if tc == nil {
		tc = &tls.Config{}
	}
	tc = tc.Clone()
	if tc.ServerName == "" {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil
		}
		tc.ServerName = host
	}
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	conn := tls.Client(c, tc)
	if err := conn.Handshake(); err != nil {
		return err
	}
	var one [1]byte
	_, err = conn.Read(one[:])
	var ne net.Error
	if err == nil || errors.Is(err, io.EOF) || errors.As(err, &ne) && ne.Timeout() {
		return nil
	}
	return err
}

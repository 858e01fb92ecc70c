package hoptls

import (
	"crypto/tls"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"vendorgate/shared/testcert"
)

// Each unusable file is refused with an error naming it.
func TestFilesRefusedNamingTheFile(t *testing.T) {
	dir := t.TempDir()
	ca := testcert.NewCA(t)
	caFile := filepath.Join(dir, "ca.pem")
	ca.WriteRoot(t, caFile)
	cert, key := ca.Issue(t, time.Now().Add(time.Hour), "127.0.0.1").Write(t, dir, "server")
	_, otherKey := testcert.NewCA(t).Issue(t, time.Now().Add(time.Hour), "127.0.0.1").Write(t, dir, "other")
	missing := filepath.Join(dir, "missing.pem")
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"missing CA", errOf(ClientConfig(ClientFiles{CAFile: missing})), "ca_file " + missing + ": no such file"},
		{"CA without a certificate", errOf(ClientConfig(ClientFiles{CAFile: key})), "ca_file " + key + ": no PEM certificate"},
		{"client key of another pair", errOf(ClientConfig(ClientFiles{CertFile: cert, KeyFile: otherKey})), "cert_file " + cert + " and key_file " + otherKey},
		{"client key alone", errOf(ClientConfig(ClientFiles{KeyFile: key})), "key_file " + key + " has no certificate"},
		{"server key missing", errOf(ServerConfig(ServerFiles{CertFile: cert, KeyFile: missing})), "key_file " + missing + ": no such file"},
		{"client CA missing", errOf(ServerConfig(ServerFiles{CertFile: cert, KeyFile: key, ClientCAFile: missing})), "client_ca_file " + missing},
		{"client CA without TLS", errOf(ServerConfig(ServerFiles{ClientCAFile: caFile})), "client_ca_file " + caFile + " needs cert_file"},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.name, c.err, c.want)
		}
	}
	if tc, err := ClientConfig(ClientFiles{}); tc != nil || err != nil {
		t.Errorf("no files: %v, %v; want nil (the system's roots)", tc, err)
	}
	if tc, err := ServerConfig(ServerFiles{}); tc != nil || err != nil {
		t.Errorf("no files: %v, %v; want nil (plain TCP)", tc, err)
	}
}

func errOf(_ *tls.Config, err error) error { return err }

// A server that requires a client certificate refuses one without it after
// the client's handshake has finished: Diagnose reads that refusal, and
// Explain says what to set; a trusted client is served and Diagnose sees
// nothing wrong.
func TestDiagnoseAndExplainOverRealHandshakes(t *testing.T) {
	dir := t.TempDir()
	serverCA, clientCA := testcert.NewCA(t), testcert.NewCA(t)
	caFile, clientCAFile := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "client-ca.pem")
	serverCA.WriteRoot(t, caFile)
	clientCA.WriteRoot(t, clientCAFile)
	cert, key := serverCA.Issue(t, time.Now().Add(time.Hour), "127.0.0.1").Write(t, dir, "server")
	ccert, ckey := clientCA.IssueClient(t, time.Now().Add(time.Hour), "gateway").Write(t, dir, "client")

	sc, err := ServerConfig(ServerFiles{CertFile: cert, KeyFile: key, ClientCAFile: clientCAFile})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", sc)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.ReadAll(c) // the handshake, then until the client closes
			}()
		}
	}()
	addr := ln.Addr().String()

	without, err := ClientConfig(ClientFiles{CAFile: caFile})
	if err != nil {
		t.Fatal(err)
	}
	refusal := Diagnose(addr, without, 5*time.Second)
	if refusal == nil || !strings.Contains(Explain(refusal).Error(), "the backend refused this gateway's client certificate") {
		t.Fatalf("without a client certificate: %v, want the refusal explained", Explain(refusal))
	}

	with, err := ClientConfig(ClientFiles{CAFile: caFile, CertFile: ccert, KeyFile: ckey})
	if err != nil {
		t.Fatal(err)
	}
	if err := Diagnose(addr, with, 300*time.Millisecond); err != nil {
		t.Fatalf("with the client certificate: %v, want nothing wrong", err)
	}

	// The system's roots do not trust the private CA.
	untrusted := Diagnose(addr, nil, 5*time.Second)
	var verr *tls.CertificateVerificationError
	if untrusted == nil || !errors.As(untrusted, &verr) || !strings.Contains(Explain(untrusted).Error(), "set backend_tls.ca_file") {
		t.Fatalf("without the CA: %v, want the certificate refused and explained", Explain(untrusted))
	}
}

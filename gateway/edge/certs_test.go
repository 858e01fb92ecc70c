package edge

import (
	"crypto/tls"
	"errors"
	"strings"
	"testing"
	"time"

	"vendorgate/config"
	"vendorgate/shared/testcert"
)

// The default certificate answers without SNI, names pick theirs (a
// wildcard covers one label), and a name none covers gets none.
func TestGetCertificateBySNI(t *testing.T) {
	ca := testcert.NewCA(t)
	dir := t.TempDir()
	a1, a2 := ca.Issue(t, time.Now().Add(time.Hour), "api.example.test").Write(t, dir, "a")
	b1, b2 := ca.Issue(t, time.Now().Add(time.Hour), "*.tenants.example.test").Write(t, dir, "b")
	s, err := Load([]config.CertFiles{{CertFile: a1, KeyFile: a2}, {CertFile: b1, KeyFile: b2}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"": "api.example.test", "API.example.test.": "api.example.test",
		"x.tenants.example.test": "*.tenants.example.test", "y.x.tenants.example.test": "", "other.test": ""} {
		c, err := s.GetCertificate(&tls.ClientHelloInfo{ServerName: name})
		got := ""
		if c != nil {
			got = c.Leaf.DNSNames[0]
		}
		if err != nil || got != want {
			t.Errorf("SNI %q: %q %v, want %q", name, got, err, want)
		}
	}
}

// Reload refuses an expired certificate (Load took one), says so once,
// and takes a good one after.
func TestReloadRefusesExpired(t *testing.T) {
	ca := testcert.NewCA(t)
	dir := t.TempDir()
	cert, key := ca.Issue(t, time.Now().Add(time.Hour), "api.example.test").Write(t, dir, "a")
	s, err := Load([]config.CertFiles{{CertFile: cert, KeyFile: key}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Reload(); !errors.Is(err, ErrUnchanged) {
		t.Fatalf("reload of unchanged files: %v", err)
	}
	old := s.Certificates()[0].NotAfter
	ca.Issue(t, time.Now().Add(-time.Minute), "api.example.test").Write(t, dir, "a")
	if _, err := s.Reload(); err == nil || !strings.Contains(err.Error(), cert) || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("reload of an expired certificate: %v", err)
	}
	if _, err := s.Reload(); !errors.Is(err, ErrUnchanged) {
		t.Fatalf("the same refused files again: %v, want ErrUnchanged", err)
	}
	if s.Certificates()[0].NotAfter != old {
		t.Fatal("the expired certificate was taken")
	}
	next := ca.Issue(t, time.Now().Add(48*time.Hour), "api.example.test")
	next.Write(t, dir, "a")
	infos, err := s.Reload()
	if err != nil || !infos[0].NotAfter.Equal(next.NotAfter.Truncate(time.Second)) {
		t.Fatalf("reload of a good certificate: %v %+v", err, infos)
	}
}

// The watcher's Poll does not refuse a pair caught half written (the new
// certificate beside the old key): it looks again, takes the pair once the
// key is there, and refuses, once, a mismatch that stays.
func TestPollWaitsForAPairHalfWritten(t *testing.T) {
	ca := testcert.NewCA(t)
	dir := t.TempDir()
	cert, key := ca.Issue(t, time.Now().Add(time.Hour), "api.example.test").Write(t, dir, "a")
	s, err := Load([]config.CertFiles{{CertFile: cert, KeyFile: key}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	next := ca.Issue(t, time.Now().Add(48*time.Hour), "api.example.test")
	testcert.WriteFile(t, cert, next.CertPEM) // the key comes later
	if _, err := s.Poll(); !errors.Is(err, ErrUnchanged) {
		t.Fatalf("a certificate beside its old key: %v, want a second look (ErrUnchanged)", err)
	}
	testcert.WriteFile(t, key, next.KeyPEM)
	if infos, err := s.Poll(); err != nil || !infos[0].NotAfter.Equal(next.NotAfter.Truncate(time.Second)) {
		t.Fatalf("the pair complete: %v %+v", err, infos)
	}
	other := ca.Issue(t, time.Now().Add(time.Hour), "api.example.test")
	testcert.WriteFile(t, key, other.KeyPEM) // a key of another certificate, for good
	var errs []error
	for range 4 {
		_, err := s.Poll()
		errs = append(errs, err)
	}
	if !errors.Is(errs[0], ErrUnchanged) || errs[1] == nil || errors.Is(errs[1], ErrUnchanged) || !strings.Contains(errs[1].Error(), key) ||
		!errors.Is(errs[2], ErrUnchanged) || !errors.Is(errs[3], ErrUnchanged) {
		t.Fatalf("a mismatch that stays, four polls: %v; want a second look, one refusal naming %s, then silence", errs, key)
	}
	if !s.Certificates()[0].NotAfter.Equal(next.NotAfter.Truncate(time.Second)) {
		t.Fatal("the refused pair was taken")
	}
}

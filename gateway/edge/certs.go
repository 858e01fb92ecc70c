package edge

import (
	"bytes"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"vendorgate/config"
)

// The certificates read from files (one by default, more chosen by the
// server name a client asks for), swapped in for new handshakes when the
// files change.

// Info describes one served certificate: for the start line, the expiry
// gauge and the reload log line.
type Info struct {
	CertFile string
	// Names are the DNS names (and IP addresses) the leaf certificate covers.
	Names    []string
	NotAfter time.Time
	// RSA: the key is RSA (a handshake costs about five times an ECDSA
	// P-256 one's CPU).
	RSA bool
}

// Expired reports whether the certificate has expired at now.
func (i Info) Expired(now time.Time) bool { return now.After(i.NotAfter) }

// set is one generation of certificates, read together: handshakes pick
// from the set in force when they began.
type set struct {
	certs  []*tls.Certificate
	infos  []Info
	byName map[string]*tls.Certificate // exact names and "*.suffix" wildcards, lower case
	dns    []string                    // every DNS name of the set, lower case: the names a renewal must keep
	sums   [][2][sha256.Size]byte      // of each certificate's files, as read
}

// covers reports whether a handshake for name (lower case, or a
// "*.suffix" wildcard) finds a certificate in the set, as GetCertificate
// chooses it.
func (sn *set) covers(name string) bool {
	if _, ok := sn.byName[name]; ok {
		return true
	}
	_, rest, ok := strings.Cut(name, ".")
	if !ok {
		return false
	}
	_, ok = sn.byName["*."+rest]
	return ok
}

// Store holds the certificates in force. Its GetCertificate is safe for
// concurrent handshakes; Reload swaps a whole new set in atomically, so a
// handshake sees either the old set or the new one.
type Store struct {
	files []config.CertFiles
	now   func() time.Time
	cur   atomic.Pointer[set]
	acme  *ACME // nil without ACME; set before the first handshake
	// required are names every set must cover (Require): the host of an
	// https public_base_url.
	required []string

	mu sync.Mutex // serialises Reload (SIGHUP and the watcher)
	// refused is the content of the last set refused, so that the watcher
	// says once, not at every tick, why a changed file is not taken;
	// pending is a changed set that failed once, looked at again on the
	// next poll before it is refused (Poll). unreadable is the last error
	// reading the files, unreadableSaid whether it was reported.
	refused, pending [][2][sha256.Size]byte
	unreadable       string
	unreadableSaid   bool
}

// Load reads every certificate and its key. It refuses a file that cannot
// be read, a PEM that does not parse, and a key that does not match its
// certificate, naming the file. An expired certificate is loaded (refusing
// it at start would turn a late renewal into an outage): the caller warns,
// and the expiry gauge shows it. now is the clock of expiry; time.Now when
// nil.
//
// With no files (ACME alone, SetACME) the store holds none of its own.
func Load(files []config.CertFiles, now func() time.Time) (*Store, error) {
	if now == nil {
		now = time.Now
	}
	s := &Store{files: files, now: now}
	sn, err := read(files)
	if err != nil {
		return nil, err
	}
	s.cur.Store(sn)
	return s, nil
}

// SetACME adds the certificates ACME manages: they answer their domains
// (and a client without SNI when no file gives a default), and the CA's
// TLS-ALPN-01 validation. Call it before serving.
func (s *Store) SetACME(a *ACME) { s.acme = a }

// Required is the name the files must cover: the host of an https
// public_base_url, unless ACME manages it (tls.acme.domains); none for an
// http:// one (TLS ends in front of the gateway, or it is a test).
func Required(c config.TLS, publicBaseURL string) []string {
	u, err := url.Parse(publicBaseURL)
	if err != nil || u.Scheme != "https" || u.Hostname() == "" {
		return nil
	}
	host := strings.ToLower(strings.TrimSuffix(u.Hostname(), "."))
	for _, d := range c.ACME.Domains {
		if strings.EqualFold(d, host) {
			return nil
		}
	}
	return []string{host}
}

// Require names the hosts every set read from the files must cover, on
// top of the DNS names of the set it replaces (Required). Call it before
// serving.
func (s *Store) Require(names ...string) { s.required = append(s.required, names...) }

// Uncovered lists the required names (Require) the files in force do not
// cover: -check refuses such a set, a start serves it with an error.
func (s *Store) Uncovered() []string {
	sn := s.cur.Load()
	var out []string
	for _, n := range s.required {
		if !sn.covers(n) {
			out = append(out, n)
		}
	}
	return out
}

// Certificates describes the certificates in force, the default first,
// then those ACME has obtained so far.
func (s *Store) Certificates() []Info {
	infos := s.cur.Load().infos
	if s.acme == nil {
		return infos
	}
	return append(slices.Clone(infos), s.acme.Certificates()...)
}

// ErrUnchanged is Reload's answer when no file changed since the set in
// force (or since the last refused one) was read.
var ErrUnchanged = errors.New("tls certificate files unchanged")

// Reload reads the files again and swaps the new set in for the next
// handshakes; connections already established keep theirs. A file that
// cannot be read, a key that does not match, an expired certificate, and
// a set that no longer covers a name in force (a DNS name of the set it
// replaces, or a required name) are refused, naming the file or the name,
// and the set in force stays: such a renewal would refuse every client
// asking for that name. A restart takes any valid set. When every
// file's content is what is in force or what was last refused, it returns
// ErrUnchanged and swaps nothing.
func (s *Store) Reload() ([]Info, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sums, err := sumFiles(s.files)
	if err != nil {
		return nil, err
	}
	if sameSums(sums, s.cur.Load().sums) || sameSums(sums, s.refused) {
		return nil, ErrUnchanged
	}
	infos, err := s.swap()
	if err != nil {
		s.refused = sums
	}
	return infos, err
}

// Poll is Reload for the file watcher, which looks again every few
// seconds. A change that is refused is reported only when the next poll
// finds the files as they were: a renewal tool that writes the
// certificate, then the key (certbot moves one link after the other) is
// not refused between the two writes, nor alerted on. A file that cannot
// be read is reported likewise, once. Otherwise it answers ErrUnchanged.
func (s *Store) Poll() ([]Info, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sums, err := sumFiles(s.files)
	if err != nil {
		if msg := err.Error(); msg != s.unreadable {
			s.unreadable, s.unreadableSaid = msg, false
			return nil, ErrUnchanged // perhaps being replaced: look again
		}
		if s.unreadableSaid {
			return nil, ErrUnchanged
		}
		s.unreadableSaid = true
		return nil, err
	}
	s.unreadable = ""
	if sameSums(sums, s.cur.Load().sums) || sameSums(sums, s.refused) {
		return nil, ErrUnchanged
	}
	infos, err := s.swap()
	switch {
	case err == nil:
		s.pending = nil
		return infos, nil
	case !sameSums(sums, s.pending):
		s.pending = sums // perhaps half written: look again
		return nil, ErrUnchanged
	}
	s.pending, s.refused = nil, sums
	return nil, err
}

// swap reads the files and puts them in force, unless one is refused.
func (s *Store) swap() ([]Info, error) {
	sn, err := read(s.files)
	if err != nil {
		return nil, err
	}
	for i, in := range sn.infos {
		if in.Expired(s.now()) {
			return nil, fmt.Errorf("tls certificate %s expired at %s: not taken", s.files[i].CertFile, in.NotAfter.UTC().Format(time.RFC3339))
		}
	}
	old := s.cur.Load()
	for _, n := range append(slices.Clone(s.required), old.dns...) {
		if !sn.covers(n) {
			return nil, fmt.Errorf("tls certificate files %s: the new set no longer covers %s, a name in force: not taken (a restart takes it)", filesOf(s.files), n)
		}
	}
	s.refused = nil
	s.cur.Store(sn)
	return sn.infos, nil
}

// GetCertificate is tls.Config.GetCertificate: the certificate covering the
// server name asked for, the default one without a name. A name no
// certificate covers gets none: the handshake fails with the
// unrecognized_name alert (and the reason unknown_sni).
func (s *Store) GetCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	sn := s.cur.Load()
	name := strings.ToLower(strings.TrimSuffix(hello.ServerName, "."))
	if s.acme != nil && (IsChallenge(hello) || s.acme.covers(name) || name == "" && len(sn.certs) == 0) {
		return s.acme.getCertificate(hello)
	}
	if name == "" {
		if len(sn.certs) == 0 {
			return nil, nil
		}
		return sn.certs[0], nil
	}
	if c, ok := sn.byName[name]; ok {
		return c, nil
	}
	if _, rest, ok := strings.Cut(name, "."); ok {
		if c, ok := sn.byName["*."+rest]; ok {
			return c, nil
		}
	}
	return nil, nil // tls.Config.Certificates is empty: "no certificates configured"
}

// read loads every pair of files into a new set.
func read(files []config.CertFiles) (*set, error) {
	sn := &set{byName: make(map[string]*tls.Certificate)}
	for _, f := range files {
		certPEM, err := os.ReadFile(f.CertFile)
		if err != nil {
			return nil, fmt.Errorf("tls certificate %s: %w", f.CertFile, pathless(err))
		}
		keyPEM, err := os.ReadFile(f.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("tls key %s: %w", f.KeyFile, pathless(err))
		}
		c, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("tls certificate %s with key %s: %w", f.CertFile, f.KeyFile, err)
		}
		leaf := c.Leaf // set by X509KeyPair since Go 1.23
		if leaf == nil {
			if leaf, err = x509.ParseCertificate(c.Certificate[0]); err != nil {
				return nil, fmt.Errorf("tls certificate %s: %w", f.CertFile, err)
			}
			c.Leaf = leaf
		}
		_, isRSA := c.PrivateKey.(*rsa.PrivateKey)
		in := Info{CertFile: f.CertFile, NotAfter: leaf.NotAfter, Names: append([]string(nil), leaf.DNSNames...), RSA: isRSA}
		for _, n := range leaf.DNSNames {
			if n = strings.ToLower(n); !slices.Contains(sn.dns, n) {
				sn.dns = append(sn.dns, n)
			}
		}
		for _, ip := range leaf.IPAddresses {
			in.Names = append(in.Names, ip.String())
		}
		sn.certs = append(sn.certs, &c)
		sn.infos = append(sn.infos, in)
		for _, n := range in.Names {
			n = strings.ToLower(n)
			if _, taken := sn.byName[n]; !taken { // the first listed wins
				sn.byName[n] = &c
			}
		}
		sn.sums = append(sn.sums, [2][sha256.Size]byte{sha256.Sum256(certPEM), sha256.Sum256(keyPEM)})
	}
	return sn, nil
}

// filesOf names the certificate files, for a message.
func filesOf(files []config.CertFiles) string {
	names := make([]string, len(files))
	for i, f := range files {
		names[i] = f.CertFile
	}
	return strings.Join(names, ", ")
}

// sumFiles hashes every file as it is now.
func sumFiles(files []config.CertFiles) ([][2][sha256.Size]byte, error) {
	sums := make([][2][sha256.Size]byte, len(files))
	for i, f := range files {
		for j, path := range []string{f.CertFile, f.KeyFile} {
			b, err := os.ReadFile(path)
			if err != nil {
				return nil, fmt.Errorf("tls file %s: %w", path, pathless(err))
			}
			sums[i][j] = sha256.Sum256(b)
		}
	}
	return sums, nil
}

func sameSums(a, b [][2][sha256.Size]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i][0][:], b[i][0][:]) || !bytes.Equal(a[i][1][:], b[i][1][:]) {
			return false
		}
	}
	return true
}

// pathless drops the path a *PathError repeats: the message names the file
// once.
func pathless(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", pe.Op, pe.Err)
	}
	return err
}

// CheckCertificates reads the certificate files of c as a start does
// (`gateway -check`): a file that cannot be read or a key that does not
// match fails, and so does a set that does not cover the host of an https
// publicBaseURL (a start serves it with an error; a check refuses it
// before it is deployed). Each certificate expired at now is a warning: it
// would be served, and refused by clients. Nothing without TLS.
func CheckCertificates(c config.TLS, publicBaseURL string, now time.Time) (warnings []string, err error) {
	if !c.Enabled() {
		return nil, nil
	}
	certs, err := Load(c.Files(), nil)
	if err != nil {
		return nil, err
	}
	certs.Require(Required(c, publicBaseURL)...)
	if missing := certs.Uncovered(); len(missing) > 0 {
		return nil, fmt.Errorf("tls certificate files do not cover %s, public_base_url's host (%s): clients asking for it would be refused",
			strings.Join(missing, ", "), publicBaseURL)
	}
	for _, in := range certs.Certificates() {
		if in.Expired(now) {
			warnings = append(warnings, fmt.Sprintf("tls certificate %s expired at %s (it would be served, and refused by clients)",
				in.CertFile, in.NotAfter.UTC().Format(time.RFC3339)))
		}
	}
	return warnings, nil
}

// Package apikey is the API-key format: an 8-character environment prefix,
// "_", and a secret of 32 bytes in unpadded base64url (43 characters): 24
// bytes from a CSPRNG, then the first 8 bytes of HMAC-SHA256 under a
// key-signing secret of the prefix followed by those 24 bytes. It parses,
// validates, generates, signs, verifies and hashes keys and does no I/O. A
// key is never logged; its hash finds it and its key id names it.
package apikey

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
)

// PrefixLen is the length of the environment prefix.
const PrefixLen = 8

// MinSecretLen and MaxSecretLen bound what Parse accepts as a secret; only
// a secret of SignedSecretLen characters can verify (Signer.Verify). The
// upper bound keeps a hostile header from being hashed at any length.
const (
	MinSecretLen = 32
	MaxSecretLen = 128
)

// Environments of a vendor and of its keys.
const (
	Sandbox = "sandbox"
	Live    = "live"
)

// Default prefixes, one per environment. Every deployment should set its own
// in config so that a key from another server fails on its prefix alone.
const (
	DefaultSandboxPrefix = "vgsandbx"
	DefaultLivePrefix    = "vglive01"
)

// ErrMalformed is returned for a key that is not of the format at all.
var ErrMalformed = errors.New("malformed api key")

// ErrForeignPrefix is returned for a well-formed key whose prefix this
// server does not issue.
var ErrForeignPrefix = errors.New("api key prefix not issued by this server")

// Prefixes are the prefixes this server issues, one per environment.
type Prefixes struct {
	Sandbox string `yaml:"sandbox"`
	Live    string `yaml:"live"`
}

// DefaultPrefixes returns the documented defaults.
func DefaultPrefixes() Prefixes {
	return Prefixes{Sandbox: DefaultSandboxPrefix, Live: DefaultLivePrefix}
}

// Validate refuses prefixes that are not 8 lowercase letters or digits, or
// that are the same for both environments.
func (p Prefixes) Validate() error {
	for env, v := range map[string]string{Sandbox: p.Sandbox, Live: p.Live} {
		if !validPrefix(v) {
			return fmt.Errorf("%s prefix %q must be %d characters of a-z and 0-9", env, v, PrefixLen)
		}
	}
	if p.Sandbox == p.Live {
		return fmt.Errorf("sandbox and live prefixes must differ (both %q)", p.Live)
	}
	return nil
}

// For returns the prefix of environment env.
func (p Prefixes) For(env string) (string, error) {
	switch env {
	case Sandbox:
		return p.Sandbox, nil
	case Live:
		return p.Live, nil
	}
	return "", fmt.Errorf("unknown environment %q", env)
}

// Environment returns the environment whose prefix is prefix.
func (p Prefixes) Environment(prefix string) (string, bool) {
	switch prefix {
	case p.Sandbox:
		return Sandbox, true
	case p.Live:
		return Live, true
	}
	return "", false
}

// Key is a parsed key. It holds the secret: never log it.
type Key struct {
	Prefix      string
	Environment string
	Secret      string
}

// Parse checks the format of raw and that its prefix is one of p's. It does
// not allocate for the secret: the returned fields slice raw.
func Parse(raw string, p Prefixes) (Key, error) {
	if len(raw) < PrefixLen+1+MinSecretLen || len(raw) > PrefixLen+1+MaxSecretLen || raw[PrefixLen] != '_' {
		return Key{}, ErrMalformed
	}
	prefix, secret := raw[:PrefixLen], raw[PrefixLen+1:]
	if !validPrefix(prefix) {
		return Key{}, ErrMalformed
	}
	for i := 0; i < len(secret); i++ {
		if !secretChar(secret[i]) {
			return Key{}, ErrMalformed
		}
	}
	env, ok := p.Environment(prefix)
	if !ok {
		return Key{}, ErrForeignPrefix
	}
	return Key{Prefix: prefix, Environment: env, Secret: secret}, nil
}

// Hash is the hex SHA-256 of the whole key: what the backend stores and what
// the gateway looks a key up by.
func Hash(raw string) string {
	var dst [sha256.Size * 2]byte
	HashTo(dst[:], raw)
	return string(dst[:])
}

// HashTo writes the hex SHA-256 of raw into dst (64 bytes) without
// allocating, for the gateway's hot path.
func HashTo(dst []byte, raw string) {
	sum := sha256.Sum256([]byte(raw))
	hex.Encode(dst, sum[:])
}

// HasKeyShape reports whether b has the shape of an API key of any prefix,
// whether or not this server issued it: 8 characters of a-z and 0-9, "_",
// and MinSecretLen to MaxSecretLen characters of the secret's alphabet,
// the whole of b (FindKeyShape finds one inside other text, as a header
// that is echoed or logged must). It does not allocate.
func HasKeyShape(b []byte) bool {
	if len(b) < PrefixLen+1+MinSecretLen || len(b) > PrefixLen+1+MaxSecretLen || b[PrefixLen] != '_' {
		return false
	}
	for i, c := range b {
		switch {
		case i < PrefixLen:
			if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
				return false
			}
		case i > PrefixLen && !secretChar(c):
			return false
		}
	}
	return true
}

// FindKeyShape is the first run of b shaped like an API key of any prefix
// (HasKeyShape's shape: 8 characters of a-z and 0-9, "_", at least
// MinSecretLen characters of the secret's alphabet), as b[start:end], with
// the secret's run taken whole however long it is; start is -1 when there
// is none. Text that is logged or echoed (a User-Agent, a request id)
// removes such a run wherever it stands: some clients put a key in odd
// places, alone or inside other text. It does not allocate.
func FindKeyShape(b []byte) (start, end int) {
	for from := PrefixLen; from < len(b); {
		j := bytes.IndexByte(b[from:], '_')
		if j < 0 {
			break
		}
		i := from + j // b[i] is '_'; the prefix would be b[i-8:i]
		from = i + 1
		if len(b)-from < MinSecretLen || !validPrefixBytes(b[i-PrefixLen:i]) {
			continue
		}
		n := 0
		for n < len(b)-from && secretChar(b[from+n]) {
			n++
		}
		if n >= MinSecretLen {
			return i - PrefixLen, from + n
		}
	}
	return -1, -1
}

func validPrefixBytes(b []byte) bool {
	for _, c := range b {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

func validPrefix(s string) bool {
	if len(s) != PrefixLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

func secretChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

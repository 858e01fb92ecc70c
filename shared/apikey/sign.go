package apikey

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"unicode/utf8"
)

// The shape of a signed secret: RandomLen bytes from crypto/rand, then the
// first MACLen bytes of HMAC-SHA256(signing secret, prefix || random), the
// whole SecretBytes in unpadded base64url: SignedSecretLen characters.
const (
	RandomLen       = 24
	MACLen          = 8
	SecretBytes     = RandomLen + MACLen
	SignedSecretLen = 43
)

// MinSigningSecretLen is the shortest key-signing secret accepted, in bytes
// of its UTF-8 form (its bytes are the HMAC key).
const MinSigningSecretLen = 32

// ErrNoSigningSecret is returned by NewSigner without any secret.
var ErrNoSigningSecret = errors.New("no key-signing secret")

// Signer holds the key-signing secrets of a deployment: the first signs new
// keys, any of them verifies, so a new secret is put first and the old one
// kept second until every key it signed has expired or been replaced.
// It is safe for concurrent use and does not allocate to verify.
type Signer struct {
	keys []macKey
}

// macKey is one secret as HMAC's two padded key blocks (RFC 2104), made
// once, so that a MAC is two SHA-256 sums over stack arrays.
type macKey struct {
	ipad, opad [sha256.BlockSize]byte
}

// NewSigner returns a Signer for secrets, the first of which signs. Each
// must be at least MinSigningSecretLen bytes of valid UTF-8.
func NewSigner(secrets []string) (*Signer, error) {
	if len(secrets) == 0 {
		return nil, ErrNoSigningSecret
	}
	s := &Signer{keys: make([]macKey, len(secrets))}
	for i, sec := range secrets {
		if len(sec) < MinSigningSecretLen || !utf8.ValidString(sec) {
			return nil, fmt.Errorf("key-signing secret %d of %d: must be at least %d characters of UTF-8", i+1, len(secrets), MinSigningSecretLen)
		}
		k := []byte(sec)
		if len(k) > sha256.BlockSize {
			sum := sha256.Sum256(k)
			k = sum[:]
		}
		for j := range sha256.BlockSize {
			var b byte
			if j < len(k) {
				b = k[j]
			}
			s.keys[i].ipad[j] = b ^ 0x36
			s.keys[i].opad[j] = b ^ 0x5c
		}
	}
	return s, nil
}

// mac writes the truncated HMAC of prefix || random under k into dst.
func (k *macKey) mac(dst *[MACLen]byte, prefix string, random *[RandomLen]byte) {
	var in [sha256.BlockSize + PrefixLen + RandomLen]byte
	copy(in[:], k.ipad[:])
	copy(in[sha256.BlockSize:], prefix)
	copy(in[sha256.BlockSize+PrefixLen:], random[:])
	inner := sha256.Sum256(in[:])
	var out [sha256.BlockSize + sha256.Size]byte
	copy(out[:], k.opad[:])
	copy(out[sha256.BlockSize:], inner[:])
	sum := sha256.Sum256(out[:])
	copy(dst[:], sum[:MACLen])
}

// Generate returns a new key for env signed with the first secret: its
// prefix, "_", and SignedSecretLen characters of base64url.
func (s *Signer) Generate(p Prefixes, env string) (string, error) {
	prefix, err := p.For(env)
	if err != nil {
		return "", err
	}
	var b [SecretBytes]byte
	random := (*[RandomLen]byte)(b[:RandomLen])
	if _, err := rand.Read(random[:]); err != nil {
		return "", fmt.Errorf("generate api key: %w", err)
	}
	s.keys[0].mac((*[MACLen]byte)(b[RandomLen:]), prefix, random)
	return prefix + "_" + base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// Verify reports whether k's secret is a signed secret (SignedSecretLen
// characters of canonical base64url) whose MAC verifies under one of the
// secrets. Every secret is tried and each compare takes constant time, so
// the time taken says nothing about which bytes matched. It does not
// allocate.
func (s *Signer) Verify(k Key) bool {
	if len(k.Prefix) != PrefixLen {
		return false
	}
	var b [SecretBytes]byte
	if !decodeSecret(&b, k.Secret) {
		return false
	}
	random := (*[RandomLen]byte)(b[:RandomLen])
	ok := 0
	var want [MACLen]byte
	for i := range s.keys {
		s.keys[i].mac(&want, k.Prefix, random)
		ok |= subtle.ConstantTimeCompare(want[:], b[RandomLen:])
	}
	return ok == 1
}

// decodeSecret decodes SignedSecretLen characters of unpadded base64url
// into dst. It refuses any other length and a non-canonical last character
// (unused low bits set), so one secret has exactly one spelling.
func decodeSecret(dst *[SecretBytes]byte, s string) bool {
	if len(s) != SignedSecretLen {
		return false
	}
	var bad byte
	o := 0
	for i := 0; i+4 <= 40; i += 4 {
		a, b, c, d := b64val[s[i]], b64val[s[i+1]], b64val[s[i+2]], b64val[s[i+3]]
		bad |= a | b | c | d
		dst[o] = a<<2 | b>>4
		dst[o+1] = b<<4 | c>>2
		dst[o+2] = c<<6 | d
		o += 3
	}
	a, b, c := b64val[s[40]], b64val[s[41]], b64val[s[42]]
	bad |= a | b | c
	dst[30] = a<<2 | b>>4
	dst[31] = b<<4 | c>>2
	return bad&0xc0 == 0 && c&0x03 == 0
}

// b64val maps a base64url character to its value, anything else to 0xff.
var b64val = func() (t [256]byte) {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	for i := range t {
		t[i] = 0xff
	}
	for i := 0; i < len(alphabet); i++ {
		t[alphabet[i]] = byte(i)
	}
	return t
}()

package apikey

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
)

const (
	testSecretA = "signing-secret-a-0123456789abcdefghij"
	testSecretB = "signing-secret-b-0123456789abcdefghij"
)

func testSigner(t testing.TB, secrets ...string) *Signer {
	t.Helper()
	s, err := NewSigner(secrets)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustParse(t testing.TB, raw string) Key {
	t.Helper()
	k, err := Parse(raw, DefaultPrefixes())
	if err != nil {
		t.Fatalf("Parse(%q) = %v", raw, err)
	}
	return k
}

// The secret is 24 random bytes then HMAC-SHA256(secret, prefix||random)[:8],
// checked against crypto/hmac.
func TestSignedSecretShape(t *testing.T) {
	for _, secret := range []string{testSecretA, strings.Repeat("long-secret-", 10), "ünïcødé-signing-secret-0123456789"} {
		s := testSigner(t, secret)
		raw, err := s.Generate(DefaultPrefixes(), Live)
		if err != nil {
			t.Fatal(err)
		}
		k := mustParse(t, raw)
		b, err := base64.RawURLEncoding.Strict().DecodeString(k.Secret)
		if err != nil || len(b) != SecretBytes || len(k.Secret) != SignedSecretLen {
			t.Fatalf("secret %q: %d bytes, %v", k.Secret, len(b), err)
		}
		m := hmac.New(sha256.New, []byte(secret))
		m.Write([]byte(DefaultLivePrefix))
		m.Write(b[:RandomLen])
		if want := m.Sum(nil)[:MACLen]; !hmac.Equal(want, b[RandomLen:]) {
			t.Fatalf("mac %x, want %x", b[RandomLen:], want)
		}
	}
}

func TestVerifyRotation(t *testing.T) {
	old := testSigner(t, testSecretA)
	raw, err := old.Generate(DefaultPrefixes(), Sandbox)
	if err != nil {
		t.Fatal(err)
	}
	k := mustParse(t, raw)
	rotated := testSigner(t, testSecretB, testSecretA)
	if !rotated.Verify(k) {
		t.Fatal("a key signed with the old first secret does not verify once it is second")
	}
	fresh, err := rotated.Generate(DefaultPrefixes(), Sandbox)
	if err != nil {
		t.Fatal(err)
	}
	if old.Verify(mustParse(t, fresh)) {
		t.Fatal("a key signed with the new first secret verifies under the old secret alone")
	}
	if !testSigner(t, testSecretB).Verify(mustParse(t, fresh)) {
		t.Fatal("the first secret does not sign")
	}
	if testSigner(t, testSecretB).Verify(k) {
		t.Fatal("a key from a different secret verifies")
	}
}

func TestVerifyRefuses(t *testing.T) {
	s := testSigner(t, testSecretA)
	raw, err := s.Generate(DefaultPrefixes(), Sandbox)
	if err != nil {
		t.Fatal(err)
	}
	secret := raw[PrefixLen+1:]
	flip := func(i int) string {
		b := []byte(secret)
		if b[i] == 'A' {
			b[i] = 'B'
		} else {
			b[i] = 'A'
		}
		return string(b)
	}
	// The last character carries 4 bits of the MAC and 2 unused bits.
	last := secret[:42] + string("AEIMQUYcgkosw048"[(strings.IndexByte("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", secret[42])/4+1)%16])
	cases := map[string]Key{
		"random part tampered": {Prefix: DefaultSandboxPrefix, Environment: Sandbox, Secret: flip(0)},
		"mac tampered":         {Prefix: DefaultSandboxPrefix, Environment: Sandbox, Secret: flip(35)},
		"last char tampered":   {Prefix: DefaultSandboxPrefix, Environment: Sandbox, Secret: last},
		"other prefix":         {Prefix: DefaultLivePrefix, Environment: Live, Secret: secret},
		"unsigned random":      mustParse(t, "vgsandbx_"+base64.RawURLEncoding.EncodeToString(make([]byte, 32))),
		"too long":             {Prefix: DefaultSandboxPrefix, Environment: Sandbox, Secret: secret + "A"},
		"too short":            {Prefix: DefaultSandboxPrefix, Environment: Sandbox, Secret: secret[:42]},
		"padded":               {Prefix: DefaultSandboxPrefix, Environment: Sandbox, Secret: secret[:42] + "="},
		"bad char":             {Prefix: DefaultSandboxPrefix, Environment: Sandbox, Secret: "+" + secret[1:]},
		"no prefix":            {Secret: secret},
	}
	for name, k := range cases {
		if s.Verify(k) {
			t.Errorf("%s: verified", name)
		}
	}
	// Non-canonical spelling: the same bytes with unused low bits set.
	b64 := "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	v := strings.IndexByte(b64, secret[42])
	if s.Verify(Key{Prefix: DefaultSandboxPrefix, Environment: Sandbox, Secret: secret[:42] + string(b64[v|1])}) {
		t.Error("non-canonical last character verified")
	}
	if !s.Verify(mustParse(t, raw)) {
		t.Fatal("the untouched key does not verify")
	}
}

func TestNewSignerRefuses(t *testing.T) {
	if _, err := NewSigner(nil); !errors.Is(err, ErrNoSigningSecret) {
		t.Fatalf("no secrets: %v", err)
	}
	for _, bad := range [][]string{{"short"}, {testSecretA, strings.Repeat("x", 31)}, {strings.Repeat("\xff", 40)}} {
		if _, err := NewSigner(bad); err == nil {
			t.Errorf("NewSigner(%q) accepted", bad)
		}
	}
}

func TestVerifyDoesNotAllocate(t *testing.T) {
	s := testSigner(t, testSecretB, testSecretA)
	raw, _ := s.Generate(DefaultPrefixes(), Sandbox)
	k := mustParse(t, raw)
	if n := testing.AllocsPerRun(100, func() {
		if !s.Verify(k) {
			t.Fatal("refused")
		}
	}); n != 0 {
		t.Fatalf("Verify allocates %v times", n)
	}
}

func FuzzVerify(f *testing.F) {
	s, _ := NewSigner([]string{testSecretA})
	good, _ := s.Generate(DefaultPrefixes(), Sandbox)
	f.Add(good[PrefixLen+1:])
	f.Add(strings.Repeat("A", 43))
	f.Fuzz(func(t *testing.T, secret string) {
		k := Key{Prefix: DefaultSandboxPrefix, Environment: Sandbox, Secret: secret}
		ok := s.Verify(k)
		b, err := base64.RawURLEncoding.Strict().DecodeString(secret)
		if err != nil || len(b) != SecretBytes || len(secret) != SignedSecretLen {
			if ok {
				t.Fatalf("verified %q, which is not a signed secret's shape", secret)
			}
			return
		}
		m := hmac.New(sha256.New, []byte(testSecretA))
		m.Write([]byte(DefaultSandboxPrefix))
		m.Write(b[:RandomLen])
		if want := hmac.Equal(m.Sum(nil)[:MACLen], b[RandomLen:]); want != ok {
			t.Fatalf("Verify(%q) = %v, crypto/hmac says %v", secret, ok, want)
		}
	})
}

package apikey

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

func TestGenerateAndParse(t *testing.T) {
	p := DefaultPrefixes()
	s := testSigner(t, testSecretA)
	seen := map[string]bool{}
	for _, env := range []string{Sandbox, Live} {
		for i := 0; i < 50; i++ {
			k, err := s.Generate(p, env)
			if err != nil {
				t.Fatal(err)
			}
			if seen[k] {
				t.Fatalf("Generate repeated a key")
			}
			seen[k] = true
			parsed, err := Parse(k, p)
			if err != nil {
				t.Fatalf("Parse(generated) = %v", err)
			}
			if parsed.Environment != env || len(parsed.Secret) != SignedSecretLen {
				t.Fatalf("parsed %+v for %s", parsed, env)
			}
			if !s.Verify(parsed) {
				t.Fatalf("a generated key does not verify")
			}
		}
	}
}

func TestParseRefuses(t *testing.T) {
	p := DefaultPrefixes()
	secret := strings.Repeat("A", 43)
	cases := []struct {
		name string
		key  string
		want error
	}{
		{"empty", "", ErrMalformed},
		{"no separator", "vgsandbx" + secret, ErrMalformed},
		{"separator misplaced", "vgsandb_" + secret, ErrMalformed},
		{"short secret", "vgsandbx_" + strings.Repeat("a", 31), ErrMalformed},
		{"long secret", "vgsandbx_" + strings.Repeat("a", 129), ErrMalformed},
		{"bad secret char", "vgsandbx_" + strings.Repeat("a", 40) + "!", ErrMalformed},
		{"space in secret", "vgsandbx_" + strings.Repeat("a", 40) + " x", ErrMalformed},
		{"upper prefix", "VGSANDBX_" + secret, ErrMalformed},
		{"foreign prefix", "othersrv_" + secret, ErrForeignPrefix},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Parse(tc.key, p); !errors.Is(err, tc.want) {
				t.Fatalf("Parse = %v, want %v", err, tc.want)
			}
		})
	}
	if _, err := Parse("vgsandbx_"+strings.Repeat("a", 32), p); err != nil {
		t.Fatalf("minimum-length secret refused: %v", err)
	}
}

func TestKeyFromAnotherServerFailsOnPrefix(t *testing.T) {
	other := Prefixes{Sandbox: "acmesbx1", Live: "acmelive"}
	k, err := testSigner(t, testSecretA).Generate(other, Live)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Parse(k, DefaultPrefixes()); !errors.Is(err, ErrForeignPrefix) {
		t.Fatalf("key of another server: %v, want ErrForeignPrefix", err)
	}
}

func TestHash(t *testing.T) {
	k := "vgsandbx_" + strings.Repeat("z", 43)
	sum := sha256.Sum256([]byte(k))
	if got, want := Hash(k), hex.EncodeToString(sum[:]); got != want {
		t.Fatalf("Hash = %s, want %s", got, want)
	}
	if Hash(k) == Hash(k+"x") {
		t.Fatal("different keys hash alike")
	}
}

func TestPrefixesValidate(t *testing.T) {
	if err := DefaultPrefixes().Validate(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []Prefixes{{"short", "vglive01"}, {"vgsandbx", "vgsandbx"}, {"vg_andbx", "vglive01"}, {"vgsandbx", "VGLIVE01"}} {
		if err := p.Validate(); err == nil {
			t.Errorf("Validate(%+v) accepted", p)
		}
	}
}

func FuzzParse(f *testing.F) {
	p := DefaultPrefixes()
	f.Add("vgsandbx_" + strings.Repeat("A", 43))
	f.Add("vglive01_" + strings.Repeat("-", 32))
	f.Add("")
	f.Add("x_y")
	f.Fuzz(func(t *testing.T, raw string) {
		k, err := Parse(raw, p)
		if err != nil {
			return
		}
		if k.Prefix+"_"+k.Secret != raw {
			t.Fatalf("parsed parts do not rebuild the key")
		}
		if _, ok := p.Environment(k.Prefix); !ok || len(k.Secret) < MinSecretLen {
			t.Fatalf("accepted %q", raw)
		}
	})
}

func BenchmarkParseAndHash(b *testing.B) {
	p := DefaultPrefixes()
	s, _ := NewSigner([]string{testSecretA})
	k, _ := s.Generate(p, Sandbox)
	var dst [64]byte
	b.ReportAllocs()
	for b.Loop() {
		pk, err := Parse(k, p)
		if err != nil || !s.Verify(pk) {
			b.Fatal("refused", err)
		}
		HashTo(dst[:], k)
	}
}

func TestHasKeyShape(t *testing.T) {
	s, err := NewSigner([]string{"a-key-signing-secret-of-32-bytes-or-more"})
	if err != nil {
		t.Fatal(err)
	}
	key, err := s.Generate(DefaultPrefixes(), Sandbox)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		v    string
		want bool
	}{
		{key, true},
		{"zzzz9999_" + key[9:], true}, // a prefix this server never issues
		{"abcdefgh_" + strings.Repeat("-", MinSecretLen), true},
		{"abcdefgh_" + strings.Repeat("a", MaxSecretLen), true},
		{"abcdefgh_" + strings.Repeat("a", MinSecretLen-1), false},
		{"abcdefgh_" + strings.Repeat("a", MaxSecretLen+1), false},
		{"abcdefg_" + key[9:], false},
		{"abcdEfgh_" + key[9:], false},
		{"abcdefgh-" + key[9:], false},
		{"abcdefgh_" + key[9:20] + "." + key[21:], false},
		{"", false},
	} {
		if got := HasKeyShape([]byte(c.v)); got != c.want {
			t.Errorf("HasKeyShape(%q) = %v, want %v", c.v, got, c.want)
		}
	}
	b := []byte(key)
	if n := testing.AllocsPerRun(100, func() { HasKeyShape(b) }); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}

// FindKeyShape finds a key-shaped run inside other text, whatever stands
// around it, takes the secret's run whole, and finds nothing in text that
// only looks alike; it allocates nothing.
func TestFindKeyShape(t *testing.T) {
	s, err := NewSigner([]string{"a-key-signing-secret-of-32-bytes-or-more"})
	if err != nil {
		t.Fatal(err)
	}
	key, err := s.Generate(DefaultPrefixes(), Live)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		v, want string
	}{
		{key, key},
		{key + ".1", key},
		{"id:" + key, key},
		{key + ":retry", key},
		{"curl/8.0 " + key, key},
		{"Mozilla/5.0 (key " + key + ") Gecko", key},
		{"x" + key, key},               // the 8 characters before "_" are the prefix
		{key + "_more", key + "_more"}, // "_" is of the secret's alphabet: the run is taken whole
		{"abcdefgh_" + strings.Repeat("Q", MinSecretLen), "abcdefgh_" + strings.Repeat("Q", MinSecretLen)},
		{"abcdefgh_" + strings.Repeat("Q", MinSecretLen-1), ""},
		{"Abcdefgh_" + strings.Repeat("Z", 43), ""},
		{"abcdefgh_" + strings.Repeat("a.", 30), ""},
		{"Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0", ""},
		{"my_client_library/1.2 (python_requests)", ""},
		{"_" + key[9:], ""},
		{"", ""},
	} {
		b := []byte(c.v)
		start, end := FindKeyShape(b)
		got := ""
		if start >= 0 {
			got = c.v[start:end]
		}
		if got != c.want {
			t.Errorf("FindKeyShape(%q) = %q, want %q", c.v, got, c.want)
		}
	}
	ua := []byte("Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0")
	if n := testing.AllocsPerRun(100, func() { FindKeyShape(ua) }); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}

// BenchmarkFindKeyShapeClean is the redaction's scan of a clean header,
// as every logged or echoed header value pays it: no allocation.
func BenchmarkFindKeyShapeClean(b *testing.B) {
	for _, c := range []struct{ name, v string }{
		{"user-agent", "Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0"},
		{"request-id", "3f2504e0-4f89-11d3-9a0c-0305e82c3301"},
	} {
		v := []byte(c.v)
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if start, _ := FindKeyShape(v); start >= 0 {
					b.Fatal("found a key")
				}
			}
		})
	}
}

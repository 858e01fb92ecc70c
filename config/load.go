// Package config loads the settings of the three binaries: built-in
// defaults, then a YAML file read strictly (an unknown key is an error that
// names the key and the file), then environment overrides, then Validate.
// It is the one place of each setting, its default and its validation:
// cmd/* loads it, and the packages that need a setting take its types.
package config

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Env looks up an environment variable; os.LookupEnv in main, a map in tests.
type Env func(name string) (string, bool)

// DefaultsVersion is the version of a configuration read from no file.
const DefaultsVersion = "defaults"

// load fills cfg (already holding defaults) from the file at path (none when
// empty) and then from env, walking `env:"NAME"` tags. It returns the
// version of what it read: the first 12 hex digits of the file's SHA-256,
// or DefaultsVersion without a file.
func load(cfg any, path string, env Env) (version string, err error) {
	version = DefaultsVersion
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return "", fmt.Errorf("read config: %w", err)
		}
		if err := decodeStrict(data, cfg); err != nil {
			return "", fmt.Errorf("config %s: %w", path, err)
		}
		sum := sha256.Sum256(data)
		version = hex.EncodeToString(sum[:6])
	}
	if env == nil {
		env = os.LookupEnv
	}
	return version, applyEnv(reflect.ValueOf(cfg).Elem(), env)
}

var unknownField = regexp.MustCompile(`line (\d+): field (\S+) not found in type`)

func decodeStrict(data []byte, cfg any) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	err := dec.Decode(cfg)
	if errors.Is(err, io.EOF) {
		return nil // an empty file keeps the defaults
	}
	if err == nil {
		return nil
	}
	var te *yaml.TypeError
	if errors.As(err, &te) {
		msgs := make([]string, 0, len(te.Errors))
		for _, e := range te.Errors {
			if m := unknownField.FindStringSubmatch(e); m != nil {
				msgs = append(msgs, fmt.Sprintf("line %s: unknown key %q", m[1], m[2]))
				continue
			}
			msgs = append(msgs, strings.TrimPrefix(e, "yaml: "))
		}
		return errors.New(strings.Join(msgs, "; "))
	}
	return err
}

var durationType = reflect.TypeFor[time.Duration]()

func applyEnv(v reflect.Value, env Env) error {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		f, fv := t.Field(i), v.Field(i)
		if name := f.Tag.Get("env"); name != "" {
			raw, ok := env(name)
			if !ok {
				continue
			}
			if err := setFromString(fv, raw); err != nil {
				return fmt.Errorf("environment %s=%q: %w", name, mask(f, raw), err)
			}
			continue
		}
		if fv.Kind() == reflect.Struct {
			if err := applyEnv(fv, env); err != nil {
				return err
			}
		}
	}
	return nil
}

func setFromString(v reflect.Value, raw string) error {
	raw = strings.TrimSpace(raw)
	switch {
	case v.Type() == durationType:
		d, err := ParseDuration(raw)
		if err != nil {
			return err
		}
		v.SetInt(int64(d))
	case v.Kind() == reflect.String:
		v.SetString(raw)
	case v.Kind() == reflect.Int || v.Kind() == reflect.Int64:
		n, err := strconv.ParseInt(raw, 10, 64)
		if err != nil {
			return fmt.Errorf("not a whole number")
		}
		v.SetInt(n)
	case v.Kind() == reflect.Bool:
		b, err := strconv.ParseBool(raw)
		if err != nil {
			return fmt.Errorf("not true or false")
		}
		v.SetBool(b)
	case v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.String:
		v.Set(reflect.ValueOf(splitList(raw)).Convert(v.Type()))
	default:
		return fmt.Errorf("unsupported setting type %s", v.Type())
	}
	return nil
}

// ParseDuration takes a Go duration ("36h", "2s") or whole days ("90d").
func ParseDuration(s string) (time.Duration, error) {
	if d, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(d)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("%q is not a number of days", s)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration (use 90d, 36h, 500ms)", s)
	}
	return d, nil
}

// Print writes cfg as YAML with every `secret:"true"` field masked and the
// password of every URL removed.
func Print(w io.Writer, cfg any) error {
	c := reflect.New(reflect.TypeOf(cfg).Elem())
	c.Elem().Set(reflect.ValueOf(cfg).Elem())
	maskSecrets(c.Elem())
	out, err := yaml.Marshal(c.Interface())
	if err != nil {
		return err
	}
	_, err = w.Write(out)
	return err
}

func maskSecrets(v reflect.Value) {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		f, fv := t.Field(i), v.Field(i)
		switch {
		case fv.Kind() == reflect.String:
			fv.SetString(mask(f, fv.String()))
		case fv.Kind() == reflect.Slice && fv.Type().Elem().Kind() == reflect.String:
			cp := make([]string, fv.Len())
			for j := range cp {
				cp[j] = mask(f, fv.Index(j).String())
			}
			fv.Set(reflect.ValueOf(cp).Convert(fv.Type()))
		case fv.Kind() == reflect.Struct:
			maskSecrets(fv)
		}
	}
}

func mask(f reflect.StructField, s string) string {
	if s == "" {
		return s
	}
	if f.Tag.Get("secret") == "true" {
		return "********"
	}
	return RedactURL(s)
}

// RedactURL hides the password of a URL (redis://:pw@host, postgres://u:pw@h)
// and leaves anything else as it is: for logs and -check.
func RedactURL(s string) string {
	if !strings.Contains(s, "://") || !strings.Contains(s, "@") {
		return s
	}
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}

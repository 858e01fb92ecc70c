package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"vendorgate/config"
)

const someID = "3f8e2c1a-5b6d-4e7f-8a9b-0c1d2e3f4a5b"

func TestParse(t *testing.T) {
	cmds := commands()
	tests := []struct {
		name   string
		argv   []string
		cmd    string // "group verb", "" for help without a command
		args   []string
		flags  map[string]string
		format string
		help   bool
	}{
		{name: "global -o before", argv: []string{"-o", "json", "vendor", "list"}, cmd: "vendor list", format: "json"},
		{name: "global -o after", argv: []string{"vendor", "list", "-o", "json"}, cmd: "vendor list", format: "json"},
		{name: "--output=", argv: []string{"vendor", "--output=json", "list"}, cmd: "vendor list", format: "json"},
		{name: "default table", argv: []string{"vendor", "get", someID}, cmd: "vendor get", args: []string{someID}, format: "table"},
		{name: "flags both forms", argv: []string{"vendor", "create", "--company", "Acme Ltd", "-environment=live", "--services", "mvr,psp"},
			cmd: "vendor create", flags: map[string]string{"company": "Acme Ltd", "environment": "live", "services": "mvr,psp"}},
		{name: "flag after positional", argv: []string{"order", "complete", someID, "--service", "mvr", "--file", "r.pdf"},
			cmd: "order complete", args: []string{someID}, flags: map[string]string{"service": "mvr", "file": "r.pdf"}},
		{name: "flag value starting with dash", argv: []string{"vendor", "create", "--company", "-dash-", "--environment", "sandbox"},
			cmd: "vendor create", flags: map[string]string{"company": "-dash-", "environment": "sandbox"}},
		{name: "double dash ends flags", argv: []string{"key", "revoke", "--", "-odd-id"}, cmd: "key revoke", args: []string{"-odd-id"}},
		{name: "two positionals", argv: []string{"vendor", "services", someID, "mvr,psp"}, cmd: "vendor services", args: []string{someID, "mvr,psp"}},
		{name: "empty services allowed", argv: []string{"vendor", "services", someID, ""}, cmd: "vendor services", args: []string{someID, ""}},
		{name: "help word", argv: []string{"help"}, help: true},
		{name: "-h alone", argv: []string{"-h"}, help: true},
		{name: "help for one command", argv: []string{"help", "key", "issue"}, cmd: "key issue", help: true},
		{name: "-h after command skips argument checks", argv: []string{"order", "fail", "--help"}, cmd: "order fail", help: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inv, err := parse(cmds, tt.argv)
			if err != nil {
				t.Fatalf("parse %q: %v", tt.argv, err)
			}
			got := ""
			if inv.cmd != nil {
				got = inv.cmd.name()
			}
			if got != tt.cmd || inv.help != tt.help {
				t.Fatalf("command %q help %v, want %q help %v", got, inv.help, tt.cmd, tt.help)
			}
			if tt.help {
				return
			}
			if strings.Join(inv.args, "|") != strings.Join(tt.args, "|") {
				t.Errorf("args %q, want %q", inv.args, tt.args)
			}
			if len(inv.flags) != len(tt.flags) {
				t.Errorf("flags %v, want %v", inv.flags, tt.flags)
			}
			for k, v := range tt.flags {
				if inv.flags[k] != v {
					t.Errorf("flag %s = %q, want %q", k, inv.flags[k], v)
				}
			}
			want := tt.format
			if want == "" {
				want = formatTable
			}
			if inv.format != want {
				t.Errorf("format %q, want %q", inv.format, want)
			}
		})
	}
}

func TestParseRefuses(t *testing.T) {
	cmds := commands()
	tests := []struct {
		argv      []string
		reason    string
		usageLine string
	}{
		{nil, "no command given", "usage: vendorctl [-o table|json] <command>"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`, "vendorctl help lists the commands"},
		{[]string{"vendor"}, `"vendor" needs a subcommand`, "usage: vendorctl vendor <command>"},
		{[]string{"vendor", "explode"}, `unknown command "vendor explode"`, "vendorctl help vendor"},
		{[]string{"vendor", "get"}, "missing VENDOR_ID", "usage: vendorctl vendor get VENDOR_ID"},
		{[]string{"vendor", "services", someID}, "missing SERVICES", "usage: vendorctl vendor services VENDOR_ID"},
		{[]string{"vendor", "get", someID, "extra"}, `unexpected argument "extra"`, "usage: vendorctl vendor get"},
		{[]string{"vendor", "get", " "}, "VENDOR_ID is empty", "usage: vendorctl vendor get"},
		{[]string{"vendor", "list", "--company", "x"}, `unknown flag --company for "vendor list"`, "usage: vendorctl vendor list"},
		{[]string{"--bogus", "vendor", "list"}, "unknown flag --bogus", "usage: vendorctl [-o table|json]"},
		{[]string{"vendor", "list", "-o", "yaml"}, `-o "yaml": use table or json (or csv for usage month)`, "usage: vendorctl vendor list"},
		{[]string{"vendor", "list", "-o"}, "flag -o needs a value", "usage: vendorctl vendor list"},
		{[]string{"-o", "json", "vendor", "list", "-o", "table"}, "-o given twice", "usage: vendorctl vendor list"},
		{[]string{"order", "fail", someID, "--service", "mvr", "--service", "psp"}, "--service given twice", "usage: vendorctl order fail"},
		{[]string{"key", "issue", someID, "--lifetime"}, "flag --lifetime needs a value", "usage: vendorctl key issue"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.argv, " "), func(t *testing.T) {
			_, err := parse(cmds, tt.argv)
			ue, ok := err.(*usageError)
			if !ok {
				t.Fatalf("parse %q: err %v, want a usage error", tt.argv, err)
			}
			if ue.reason != tt.reason {
				t.Errorf("reason %q, want %q", ue.reason, tt.reason)
			}
			if line := usageLine(ue); !strings.Contains(line, tt.usageLine) {
				t.Errorf("usage line %q does not contain %q", line, tt.usageLine)
			}
		})
	}
}

func TestParseServices(t *testing.T) {
	for in, want := range map[string]string{"mvr,psp": "mvr,psp", " mvr , cdlis ": "mvr,cdlis", "": "", "none": "",
		"driver_reviews": "driver_reviews"} {
		got, err := parseServices(in)
		if err != nil || got == nil || strings.Join(got, ",") != want {
			t.Errorf("parseServices(%q) = %q, %v; want %q (never nil)", in, got, err, want)
		}
	}
	for in, reason := range map[string]string{"mvr,bogus": `"bogus" is not a service`, "mvr,,psp": `"" is not a service`,
		"psp,psp": "psp is listed twice", "MVR": `"MVR" is not a service`} {
		if _, err := parseServices(in); err == nil || !strings.Contains(err.Error(), reason) {
			t.Errorf("parseServices(%q) error %v, want %q", in, err, reason)
		}
	}
}

func TestParseLifetime(t *testing.T) {
	for in, want := range map[string]int64{"90d": 90 * 86400, "36h": 36 * 3600, "2s": 2, "1d": 86400, "1m30s": 90} {
		if got, err := parseLifetime(in); err != nil || got != want {
			t.Errorf("parseLifetime(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for in, reason := range map[string]string{"0s": "shorter than one second", "500ms": "shorter than one second",
		"1500ms": "not a whole number of seconds", "-5s": "shorter than one second", "ninety": "not a lifetime",
		"xd": "not a lifetime", "36501d": "longer than 36500 days", "99999999999d": "longer than",
		"0d": "shorter than one second"} {
		if _, err := parseLifetime(in); err == nil || !strings.Contains(err.Error(), reason) {
			t.Errorf("parseLifetime(%q) error %v, want %q", in, err, reason)
		}
	}
	// What a refusal suggests is a lifetime it takes.
	for _, in := range []string{"ninety", "5x", "1.5.d"} {
		_, err := parseLifetime(in)
		if err == nil || strings.Contains(err.Error(), "ms") || !strings.Contains(err.Error(), "(use 90d, 36h or 2s") {
			t.Errorf("parseLifetime(%q) error %v: want it to suggest 90d, 36h or 2s, nothing under a second", in, err)
		}
	}
}

func TestReadPDF(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "r.pdf")
	os.WriteFile(good, []byte("%PDF-1.4\n%%EOF\n"), 0o600)
	bad := filepath.Join(dir, "r.txt")
	os.WriteFile(bad, []byte("hello, not a pdf"), 0o600)
	if b, err := readPDF(good); err != nil || !bytes.HasPrefix(b, []byte("%PDF-")) {
		t.Fatalf("readPDF(good) = %q, %v", b, err)
	}
	if _, err := readPDF(bad); err == nil || !strings.Contains(err.Error(), "is not a PDF") {
		t.Fatalf("readPDF(bad) error %v, want a not-a-PDF refusal", err)
	}
	if _, err := readPDF(filepath.Join(dir, "missing.pdf")); err == nil {
		t.Fatal("readPDF(missing) succeeded")
	}
}

// TestRunRefusesLocally drives run with arguments that must be refused
// before any call: the admin URL points at a closed port, so a call that
// slipped through would fail with "cannot reach" instead of the reason.
func TestRunRefusesLocally(t *testing.T) {
	dir := t.TempDir()
	notPDF := filepath.Join(dir, "report.pdf")
	os.WriteFile(notPDF, []byte("GIF89a..."), 0o600)
	reviews := filepath.Join(dir, "reviews.json")
	os.WriteFile(reviews, []byte(`{"found":true,"reviews":[],"typo":1}`), 0o600)
	tests := []struct {
		argv   []string
		reason string
	}{
		{[]string{"vendor", "create", "--company", "A", "--environment", "prod"}, `--environment "prod": use sandbox or live`},
		{[]string{"vendor", "create", "--environment", "live"}, "--company is required"},
		{[]string{"vendor", "create", "--company", "A"}, "--environment is required"},
		{[]string{"vendor", "create", "--company", "A", "--environment", "live", "--services", "mvr,xyz"}, `--services: "xyz" is not a service`},
		{[]string{"vendor", "services", someID, "mvr,mvr"}, "SERVICES: mvr is listed twice"},
		{[]string{"vendor", "get", "not-a-uuid"}, `VENDOR_ID "not-a-uuid" is not a UUID`},
		{[]string{"key", "issue", someID, "--lifetime", "0s"}, "--lifetime: \"0s\" is shorter than one second"},
		{[]string{"key", "revoke", "1234"}, `KEY_ID "1234" is not a UUID`},
		{[]string{"order", "list", "--status", "held"}, `--status "held": use one of under_review, processing`},
		{[]string{"order", "list", "--reason", "no_record"}, `--reason "no_record": use a hold reason, one of identity_review, manual_review, report_review`},
		{[]string{"order", "list", "--vendor", "acme"}, `--vendor "acme" is not a UUID`},
		{[]string{"order", "list", "--since", "yesterday"}, `--since "yesterday": use a time back from now (24h, 7d, 90m) or an RFC 3339 time`},
		{[]string{"order", "release", someID, "--service", "dmv"}, `--service "dmv": use one of mvr, psp, cdlis, driver_reviews`},
		{[]string{"order", "complete", someID}, "--service is required"},
		{[]string{"order", "complete", someID, "--service", "mvr", "--file", notPDF}, "is not a PDF (it does not start with %PDF-)"},
		{[]string{"order", "complete", someID, "--service", "driver_reviews", "--file", notPDF}, "--file is for the report services"},
		{[]string{"order", "complete", someID, "--service", "psp", "--result", reviews}, "--result is for driver_reviews only"},
		{[]string{"order", "complete", someID, "--service", "driver_reviews", "--result", reviews}, `unknown field "typo"`},
		{[]string{"order", "fail", someID, "--service", "psp"}, "--reason is required (one of provider_failed, no_record,"},
		{[]string{"order", "fail", someID, "--service", "psp", "--reason", "manual_review"}, `--reason "manual_review": use one of provider_failed`},
	}
	lookup := envOf(map[string]string{"VENDORCTL_ADMIN_URL": "http://127.0.0.1:1", "VENDORCTL_ADMIN_TOKEN": "test-token"})
	for _, tt := range tests {
		t.Run(strings.Join(tt.argv, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), tt.argv, lookup, &stdout, &stderr)
			lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
			if code != 2 || len(lines) != 2 || !strings.HasPrefix(lines[0], "vendorctl: ") ||
				!strings.Contains(lines[0], tt.reason) || !strings.HasPrefix(lines[1], "usage: vendorctl "+tt.argv[0]+" "+tt.argv[1]) {
				t.Fatalf("exit %d, stderr:\n%s\nwant exit 2, reason %q, then the usage line", code, stderr.String(), tt.reason)
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout %q, want nothing", stdout.String())
			}
		})
	}
}

func TestRunHelpAndConfig(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"help"}, envOf(nil), &stdout, &stderr); code != 0 {
		t.Fatalf("help exit %d: %s", code, stderr.String())
	}
	// A usage may be wrapped over lines: compare words.
	words := strings.Join(strings.Fields(stdout.String()), " ")
	for _, c := range commands() {
		if !strings.Contains(words, "vendorctl "+c.usage) {
			t.Errorf("help does not list %q", c.usage)
		}
	}
	stdout.Reset()
	if code := run(context.Background(), []string{"key", "issue", "-h"}, envOf(nil), &stdout, &stderr); code != 0 ||
		!strings.HasPrefix(stdout.String(), "usage: vendorctl key issue VENDOR_ID [--lifetime") {
		t.Fatalf("key issue -h: exit %d, stdout %q", code, stdout.String())
	}
	stderr.Reset()
	code := run(context.Background(), []string{"vendor", "list"}, envOf(nil), &stdout, &stderr)
	if code != 1 || stderr.String() != "vendorctl: VENDORCTL_ADMIN_TOKEN is not set: export the backend's admin token\n" {
		t.Fatalf("no token: exit %d, stderr %q", code, stderr.String())
	}
	stderr.Reset()
	code = run(context.Background(), []string{"vendor", "list"},
		envOf(map[string]string{"VENDORCTL_ADMIN_TOKEN": "t", "VENDORCTL_ADMIN_URL": "ftp://x"}), &stdout, &stderr)
	if code != 1 || !strings.HasPrefix(stderr.String(), "vendorctl: VENDORCTL_ADMIN_URL") || strings.Count(stderr.String(), "\n") != 1 {
		t.Fatalf("bad URL: exit %d, stderr %q", code, stderr.String())
	}
}

func TestOneLine(t *testing.T) {
	if got := oneLine("a: x\nb: y\r\n"); got != "a: x; b: y" {
		t.Fatalf("oneLine = %q", got)
	}
}

func envOf(m map[string]string) config.Env {
	return func(name string) (string, bool) {
		v, ok := m[name]
		return v, ok
	}
}

func TestMember(t *testing.T) {
	if m, err := member(json.RawMessage(`{"vendors":[{"a":1}]}`), "vendors"); err != nil || string(m) != `[{"a":1}]` {
		t.Fatalf("member = %s, %v", m, err)
	}
	if m, err := member(json.RawMessage(`{"vendors":null}`), "vendors"); err != nil || string(m) != `[]` {
		t.Fatalf("null member = %s, %v; want []", m, err)
	}
	if _, err := member(json.RawMessage(`{"keys":[]}`), "vendors"); err == nil {
		t.Fatal("missing member accepted")
	}
}

// TestHelpFitsHundredColumns: every help vendorctl prints (the whole list,
// each group's, each command's) fits in 100 columns, and wrapping keeps
// every word of it.
func TestHelpFitsHundredColumns(t *testing.T) {
	helps := [][]string{{"help"}}
	groups := map[string]bool{}
	for _, c := range commands() {
		if !groups[c.group] {
			groups[c.group] = true
			helps = append(helps, []string{"help", c.group})
		}
		helps = append(helps, append(strings.Fields(c.name()), "-h"))
	}
	for _, argv := range helps {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), argv, envOf(nil), &stdout, &stderr); code != 0 {
			t.Fatalf("%q: exit %d: %s", argv, code, stderr.String())
		}
		for _, line := range strings.Split(stdout.String(), "\n") {
			if n := len([]rune(line)); n > 100 {
				t.Errorf("%q: a line of %d columns: %q", argv, n, line)
			}
		}
	}
	if len(helps) < 10 {
		t.Fatalf("only %d helps checked", len(helps))
	}
}

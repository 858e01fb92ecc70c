// Command vendorctl is vendorgate's operator CLI: it creates and approves
// vendors, issues and revokes API keys, and acts on orders held for staff,
// all through the backend's admin API (docs/CONTRACTS.md). Settings come
// from the environment (config.LoadVendorctl); output is an aligned table,
// or the API's JSON with -o json.
//
// Exit status: 0 done, 1 the call failed (the API refused it or the backend
// could not be reached), 2 the command line is wrong. Every failure is one
// line on stderr, "vendorctl: <reason>", followed for usage errors by the
// usage line of the command.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"vendorgate/cmd/vendorctl/internal/adminapi"
	"vendorgate/config"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// env is what a command runs with.
type env struct {
	ctx context.Context
	api *adminapi.Client
	// gateway is a gateway's admin listener (the usage view); nil when
	// VENDORCTL_GATEWAY_ADMIN_TOKEN is not set.
	gateway *adminapi.Client
	out     io.Writer
	format  string
	now     func() time.Time
}

// run is vendorctl from arguments to exit status, with its inputs passed in
// so that tests drive it without a process.
func run(ctx context.Context, argv []string, lookup config.Env, stdout, stderr io.Writer) int {
	cmds := commands()
	inv, err := parse(cmds, argv)
	if err != nil {
		return fail(stderr, err)
	}
	if inv.help {
		writeUsage(stdout, cmds, inv.group, inv.cmd)
		return 0
	}
	cfg, err := config.LoadVendorctl(lookup)
	if err != nil {
		return fail(stderr, err)
	}
	api, err := adminapi.New(adminapi.Options{BaseURL: cfg.AdminURL, Token: cfg.AdminToken, Timeout: 10 * time.Second,
		TokenName: "VENDORCTL_ADMIN_TOKEN", URLName: "VENDORCTL_ADMIN_URL, which must be the backend's admin_listen"})
	if err != nil {
		return fail(stderr, err)
	}
	e := &env{ctx: ctx, api: api, out: stdout, format: inv.format, now: time.Now}
	if cfg.GatewayAdminToken != "" {
		e.gateway, err = adminapi.New(adminapi.Options{BaseURL: cfg.GatewayAdminURL, Token: cfg.GatewayAdminToken,
			Timeout: 10 * time.Second, Name: "the gateway admin listener", TokenName: "VENDORCTL_GATEWAY_ADMIN_TOKEN",
			URLName: "VENDORCTL_GATEWAY_ADMIN_URL, which must be the gateway's admin_listen"})
		if err != nil {
			return fail(stderr, err)
		}
	}
	if err := inv.cmd.run(e, inv); err != nil {
		return fail(stderr, err)
	}
	return 0
}

// fail prints err as one line (and a usage line for usage errors) and
// returns the exit status.
func fail(stderr io.Writer, err error) int {
	fmt.Fprintf(stderr, "vendorctl: %s\n", oneLine(err.Error()))
	var ue *usageError
	if errors.As(err, &ue) {
		fmt.Fprintln(stderr, usageLine(ue))
		return 2
	}
	return 1
}

// oneLine folds a multi-line message (errors.Join) onto one line.
func oneLine(s string) string {
	return strings.Join(strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == '\r' }), "; ")
}

package main

import (
	"fmt"
	"io"
	"strings"
)

// Output formats of -o.
const (
	formatTable = "table"
	formatJSON  = "json"
	// formatCSV is only for commands that say so (command.csv).
	formatCSV = "csv"
)

// command is one `vendorctl GROUP VERB` with what it accepts.
type command struct {
	group, verb string
	// args names the positional arguments, all required, in order, unless
	// the flag argsUnless names is given: then none may be.
	args       []string
	argsUnless string
	// flags lists the flags the command takes; each takes a value, but
	// those also in bools, which take none.
	flags, bools []string
	// csv: the command writes -o csv.
	csv bool
	// usage is the line after "vendorctl ", summary says what it does.
	usage, summary string
	run            func(*env, *invocation) error
}

func (c *command) isBool(flag string) bool {
	for _, f := range c.bools {
		if f == flag {
			return true
		}
	}
	return false
}

func (c *command) name() string { return c.group + " " + c.verb }

func (c *command) takes(flag string) bool {
	for _, f := range c.flags {
		if f == flag {
			return true
		}
	}
	return false
}

// invocation is a parsed command line.
type invocation struct {
	cmd    *command // nil for top-level help
	args   []string
	flags  map[string]string
	format string
	help   bool
	// group is set when only a group was named (`vendorctl vendor -h`).
	group string
}

// usageError is a command line vendorctl cannot run; it exits 2 and prints
// the usage line of the command (or of vendorctl) after the reason.
type usageError struct {
	reason string
	cmd    *command
	group  string
}

func (e *usageError) Error() string { return e.reason }

func usagef(cmd *command, format string, args ...any) *usageError {
	return &usageError{reason: fmt.Sprintf(format, args...), cmd: cmd}
}

// commands is vendorctl's command table, in the order usage lists them.
func commands() []*command {
	return []*command{
		{group: "vendor", verb: "create", flags: []string{"company", "environment", "services"},
			usage:   "vendor create --company NAME --environment sandbox|live [--services mvr,psp,...]",
			summary: "create a vendor (pending approval)", run: vendorCreate},
		{group: "vendor", verb: "approve", args: []string{"VENDOR_ID"},
			usage: "vendor approve VENDOR_ID", summary: "approve a vendor", run: vendorAction("approve")},
		{group: "vendor", verb: "suspend", args: []string{"VENDOR_ID"},
			usage: "vendor suspend VENDOR_ID", summary: "suspend a vendor: results readable, no new orders", run: vendorAction("suspend")},
		{group: "vendor", verb: "reinstate", args: []string{"VENDOR_ID"},
			usage: "vendor reinstate VENDOR_ID", summary: "reinstate a suspended vendor", run: vendorAction("reinstate")},
		{group: "vendor", verb: "services", args: []string{"VENDOR_ID", "SERVICES"},
			usage: "vendor services VENDOR_ID mvr,psp,...|none", summary: "set the services a vendor may order", run: vendorServices},
		{group: "vendor", verb: "get", args: []string{"VENDOR_ID"},
			usage: "vendor get VENDOR_ID", summary: "show a vendor", run: vendorGet},
		{group: "vendor", verb: "list",
			usage: "vendor list", summary: "list vendors, oldest first", run: vendorList},
		{group: "key", verb: "issue", args: []string{"VENDOR_ID"}, flags: []string{"lifetime"},
			usage: "key issue VENDOR_ID [--lifetime 90d|36h|...]", summary: "issue an API key; the key is shown only once", run: keyIssue},
		{group: "key", verb: "revoke", args: []string{"KEY_ID"},
			usage: "key revoke KEY_ID", summary: "revoke an API key", run: keyRevoke},
		{group: "key", verb: "rotate", args: []string{"KEY_ID"}, flags: []string{"overlap"},
			usage:   "key rotate KEY_ID [--overlap 24h]",
			summary: "issue a key to replace KEY_ID; both work until the overlap ends, then KEY_ID is revoked (--overlap 0 for a leaked key: revoked now)",
			run:     keyRotate},
		{group: "key", verb: "list", args: []string{"VENDOR_ID"}, flags: []string{"expiring"}, argsUnless: "expiring",
			usage:   "key list VENDOR_ID | key list --expiring 14d",
			summary: "list a vendor's keys (never the secret), with rotation pairs and the time each has left; with --expiring, every vendor's working keys that expire within it", run: keyList},
		{group: "order", verb: "list", flags: []string{"status", "reason", "vendor", "since", "limit", "cursor"},
			usage:   "order list [--status under_review] [--reason identity_review|manual_review|report_review] [--vendor ID] [--since 24h] [--limit 50]",
			summary: "list every vendor's orders, newest first: held ones with why, for how long, and when the deadline closes them", run: orderList},
		{group: "order", verb: "get", args: []string{"ORDER_ID"},
			usage: "order get ORDER_ID", summary: "show an order", run: orderGet},
		{group: "order", verb: "release", args: []string{"ORDER_ID"}, flags: []string{"service"},
			usage: "order release ORDER_ID [--service S]", summary: "release held services (all when no --service)", run: orderRelease},
		{group: "order", verb: "complete", args: []string{"ORDER_ID"}, flags: []string{"service", "file", "result"},
			usage:   "order complete ORDER_ID --service S [--file report.pdf] [--result reviews.json]",
			summary: "complete a service (report PDF, or driver_reviews result)", run: orderComplete},
		{group: "order", verb: "fail", args: []string{"ORDER_ID"}, flags: []string{"service", "reason"},
			usage: "order fail ORDER_ID --service S --reason provider_failed|no_record|no_report|...", summary: "fail a service with a reason", run: orderFail},
		{group: "order", verb: "delete", args: []string{"ORDER_ID"},
			usage: "order delete ORDER_ID", summary: "delete an order's data (unfinished services fail record_deleted)", run: orderDelete},
		{group: "audit", verb: "list", flags: []string{"vendor", "order", "since", "action", "limit"},
			usage:   "audit list [--vendor ID] [--order ID] [--since RFC3339|24h] [--action A] [--limit 100]",
			summary: "the audit trail, newest first: every admin action and report download, who, from where, with its request id", run: auditList},
		{group: "usage", verb: "top", flags: []string{"window", "top"},
			usage: "usage top [--window 1h] [--top 20]", summary: "vendors and limits by refusals, across every gateway sharing the Redis", run: usageTop},
		{group: "usage", verb: "month", args: []string{"VENDOR_ID"}, argsUnless: "all", flags: []string{"month", "all"}, bools: []string{"all"}, csv: true,
			usage:   "usage month VENDOR_ID|--all [--month 2026-11] [-o csv|json]",
			summary: "a month's use for billing (default: this month, UTC): per environment and service the orders placed, services completed, failed, held and billable (completed or no_record), and the gateways' requests and refusals by limit", run: usageMonth},
		{group: "usage", verb: "show", args: []string{"VENDOR_ID"}, flags: []string{"window"},
			usage: "usage show VENDOR_ID [--window 1h]", summary: "one vendor's use of each limit, minute by minute", run: usageShow},
	}
}

func findCommand(cmds []*command, group, verb string) *command {
	for _, c := range cmds {
		if c.group == group && c.verb == verb {
			return c
		}
	}
	return nil
}

func isGroup(cmds []*command, group string) bool {
	for _, c := range cmds {
		if c.group == group {
			return true
		}
	}
	return false
}

// parse reads a command line. The global flags -o/--output and -h/--help
// are accepted anywhere; a command's own flags after its name, as --name
// value or --name=value (one dash works too). "--" ends the flags.
func parse(cmds []*command, argv []string) (*invocation, error) {
	inv := &invocation{flags: map[string]string{}, format: formatTable}
	var words []string
	formatSet := false
	flagsDone := false
	for i := 0; i < len(argv); i++ {
		a := argv[i]
		if flagsDone || a == "-" || !strings.HasPrefix(a, "-") {
			words = append(words, a)
			if inv.cmd == nil && len(words) == 2 {
				inv.cmd = findCommand(cmds, words[0], words[1])
			}
			continue
		}
		if a == "--" {
			flagsDone = true
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-"), "=")
		switch {
		case name == "h" || name == "help":
			if hasValue {
				return nil, usagef(inv.cmd, "flag -%s takes no value", name)
			}
			inv.help = true
			continue
		case name == "o" || name == "output":
		case inv.cmd != nil && inv.cmd.isBool(name):
			if hasValue {
				return nil, usagef(inv.cmd, "flag --%s takes no value", name)
			}
			if _, dup := inv.flags[name]; dup {
				return nil, usagef(inv.cmd, "--%s given twice", name)
			}
			inv.flags[name] = "true"
			continue
		case inv.cmd != nil && inv.cmd.takes(name):
		case inv.cmd != nil:
			return nil, usagef(inv.cmd, "unknown flag %s for %q", a, inv.cmd.name())
		default:
			return nil, usagef(nil, "unknown flag %s", a)
		}
		if !hasValue {
			if i+1 >= len(argv) {
				return nil, usagef(inv.cmd, "flag %s needs a value", a)
			}
			i++
			value = argv[i]
		}
		if name == "o" || name == "output" {
			if formatSet {
				return nil, usagef(inv.cmd, "-o given twice")
			}
			if value != formatTable && value != formatJSON && value != formatCSV {
				return nil, usagef(inv.cmd, "-o %q: use table or json (or csv for usage month)", value)
			}
			inv.format, formatSet = value, true
			continue
		}
		if _, dup := inv.flags[name]; dup {
			return nil, usagef(inv.cmd, "--%s given twice", name)
		}
		inv.flags[name] = value
	}

	switch {
	case len(words) == 0:
		if inv.help {
			return inv, nil
		}
		return nil, usagef(nil, "no command given")
	case words[0] == "help":
		// `vendorctl help`, `vendorctl help vendor`, `vendorctl help vendor create`.
		inv.help = true
		if len(words) >= 3 {
			inv.cmd = findCommand(cmds, words[1], words[2])
		}
		if inv.cmd == nil && len(words) >= 2 && isGroup(cmds, words[1]) {
			inv.group = words[1]
		}
		return inv, nil
	case !isGroup(cmds, words[0]):
		return nil, usagef(nil, "unknown command %q", words[0])
	case inv.cmd == nil:
		e := &usageError{reason: fmt.Sprintf("%q needs a subcommand", words[0]), group: words[0]}
		if len(words) >= 2 {
			e.reason = fmt.Sprintf("unknown command %q", words[0]+" "+words[1])
		}
		if inv.help && len(words) == 1 {
			inv.group = words[0]
			return inv, nil
		}
		return nil, e
	}
	if inv.help {
		return inv, nil
	}
	if inv.format == formatCSV && !inv.cmd.csv {
		return nil, usagef(inv.cmd, "-o csv: %q writes table or json", inv.cmd.name())
	}
	inv.args = words[2:]
	if _, ok := inv.flags[inv.cmd.argsUnless]; ok && inv.cmd.argsUnless != "" {
		if len(inv.args) > 0 {
			return nil, usagef(inv.cmd, "--%s takes no %s", inv.cmd.argsUnless, strings.Join(inv.cmd.args, " "))
		}
		return inv, nil
	}
	if want := inv.cmd.args; len(inv.args) != len(want) {
		if len(inv.args) < len(want) {
			return nil, usagef(inv.cmd, "missing %s", strings.Join(want[len(inv.args):], " "))
		}
		return nil, usagef(inv.cmd, "unexpected argument %q", inv.args[len(want)])
	}
	for i, a := range inv.args {
		if strings.TrimSpace(a) == "" && inv.cmd.args[i] != "SERVICES" {
			return nil, usagef(inv.cmd, "%s is empty", inv.cmd.args[i])
		}
	}
	return inv, nil
}

// writeUsage prints vendorctl's usage: every command, or one group's, or one.
func writeUsage(w io.Writer, cmds []*command, group string, one *command) {
	if one != nil {
		line := "usage: vendorctl " + one.usage
		if !strings.Contains(one.usage, "[-o ") {
			line += " [-o table|json]"
		}
		fmt.Fprint(w, wrap(line, "", "    "))
		fmt.Fprint(w, "\n"+wrap(capitalise(one.summary)+".", "", ""))
		return
	}
	fmt.Fprintln(w, "usage: vendorctl [-o table|json] <command> [arguments]")
	if group == "" {
		fmt.Fprintln(w, "\nvendorctl manages vendors, API keys and orders through the vendorgate backend's admin API.")
	}
	last := ""
	for _, c := range cmds {
		if group != "" && c.group != group {
			continue
		}
		if c.group != last {
			fmt.Fprintf(w, "\n%s commands:\n", c.group)
			last = c.group
		}
		// The command, then what it does below it: one column of
		// usages and summaries side by side is as wide as the longest
		// usage plus the longest summary.
		fmt.Fprint(w, wrap("vendorctl "+c.usage, "  ", "        "))
		fmt.Fprint(w, wrap(c.summary, "      ", "      "))
	}
	fmt.Fprint(w, `
Flags:
  -o, --output table|json   output format (default table), before or after the command;
                            usage month also writes csv
  -h, --help                show this help (vendorctl help COMMAND for one command)

Environment:
  VENDORCTL_ADMIN_URL            the backend's admin API (default http://127.0.0.1:8082)
  VENDORCTL_ADMIN_TOKEN          the backend's admin token (required)
  VENDORCTL_GATEWAY_ADMIN_URL    a gateway's admin listener, for usage
                                 (default http://127.0.0.1:9090)
  VENDORCTL_GATEWAY_ADMIN_TOKEN  the gateway's admin token (required by usage top and show)

Exit status: 0 done; 1 the call failed (the API's error code and message, or the backend
unreachable); 2 the command line is wrong. Errors are one line on stderr.
`)
}

// helpWords splits s at spaces, keeping "[--reason a|b]" one word.
func helpWords(s string) []string {
	var words []string
	open := false
	for _, f := range strings.Fields(s) {
		if open {
			words[len(words)-1] += " " + f
		} else {
			words = append(words, f)
		}
		open = strings.Count(words[len(words)-1], "[") > strings.Count(words[len(words)-1], "]")
	}
	return words
}

// helpColumns is the width the help fits in: a terminal's 80 columns and
// more are common, 100 is what every line here stays within.
const helpColumns = 100

// wrap breaks s at spaces into lines of at most helpColumns, the first
// indented by first and the rest by rest; an optional argument in brackets
// is never broken, and a word longer than a line stands alone on its own.
func wrap(s, first, rest string) string {
	var b strings.Builder
	line := first
	empty := true
	for _, word := range helpWords(s) {
		if !empty && len([]rune(line))+1+len([]rune(word)) > helpColumns {
			b.WriteString(line + "\n")
			line, empty = rest, true
		}
		if !empty {
			line += " "
		}
		line += word
		empty = false
	}
	b.WriteString(line + "\n")
	return b.String()
}

// usageLine is the one line printed after a usage error's reason.
func usageLine(e *usageError) string {
	switch {
	case e.cmd != nil:
		return "usage: vendorctl " + e.cmd.usage
	case e.group != "":
		return "usage: vendorctl " + e.group + " <command> ... (vendorctl help " + e.group + " lists them)"
	}
	return "usage: vendorctl [-o table|json] <command> [arguments] (vendorctl help lists the commands)"
}

func capitalise(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"vendorgate/bench/internal/childproc"
)

// The attack runs in a process of its own (this binary, started again with
// EDGEMEM_ROLE=attack), so that it can be given CPUs of its own: in the
// tool's process its thousands of goroutines would delay the good client's,
// and the good client would measure the tool.
const (
	envRole    = "EDGEMEM_ROLE"
	envAttack  = "EDGEMEM_ATTACK" // the attacker's settings, JSON
	envResult  = "EDGEMEM_RESULT" // where the attacker writes its counts on SIGTERM
	roleAttack = "attack"
)

// attackSettings is what the attacker process is told.
type attackSettings struct {
	Addr   string        `json:"addr"`
	Conns  int           `json:"conns"`
	Peers  int           `json:"peers"`
	Body   int           `json:"body"`
	Mode   string        `json:"mode"`
	Reopen time.Duration `json:"reopen"`
	// Jitter adds up to this much, at random, to each pause before a
	// reopen: 0 keeps the connections in step (those answered together
	// come back together), more spreads them.
	Jitter time.Duration `json:"jitter"`
	// TLS: the gateway serves HTTPS (the stall mode sends a partial
	// ClientHello).
	TLS bool `json:"tls"`
}

// attackCounts is what the attacker process reports when it stops.
type attackCounts struct {
	Opened, Answered, Cut, DialFailed int64
	Statuses                          map[int]int
}

// runAttackRole runs the attacker until SIGTERM, then writes its counts to
// the file named by EDGEMEM_RESULT. ok is false when this process is not
// the attacker.
func runAttackRole() (ok bool, err error) {
	if os.Getenv(envRole) != roleAttack {
		return false, nil
	}
	var s attackSettings
	if err := json.Unmarshal([]byte(os.Getenv(envAttack)), &s); err != nil {
		return true, fmt.Errorf("attack settings: %w", err)
	}
	raiseFileLimit()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	a := &attacker{attackSettings: s}
	a.run(ctx)
	b, err := json.Marshal(a.counts())
	if err != nil {
		return true, err
	}
	return true, os.WriteFile(os.Getenv(envResult), b, 0o600)
}

// attackProc is the attacker process, seen from the tool.
type attackProc struct {
	p      *childproc.Proc
	result string
}

// startAttack starts the attacker on cpus ("": not pinned).
func startAttack(dir, self, cpus string, s attackSettings) (*attackProc, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	result := filepath.Join(dir, "attack.json")
	name, args := command(cpus, self)
	p, err := childproc.Start(dir, "attacker", []string{envRole + "=" + roleAttack, envAttack + "=" + string(b), envResult + "=" + result}, name, args...)
	if err != nil {
		return nil, err
	}
	return &attackProc{p: p, result: result}, nil
}

// stop ends the attack (every connection closed) and reads its counts.
func (a *attackProc) stop() (attackCounts, error) {
	a.p.Stop(30 * time.Second)
	var c attackCounts
	b, err := os.ReadFile(a.result)
	if err != nil {
		return c, fmt.Errorf("attacker: %w\n%s", err, a.p.Tail())
	}
	return c, json.Unmarshal(b, &c)
}

// attacker keeps Conns connections open, each sending the headers of a
// POST that announces Body bytes, without a key, and never the body; a
// connection the gateway answers or closes is opened again after Reopen.
type attacker struct {
	attackSettings
	opened, answered, cut, dialFailed atomic.Int64
	statusMu                          sync.Mutex
	statuses                          map[int]int
}

func (a *attacker) run(ctx context.Context) {
	a.statuses = map[int]int{}
	var wg sync.WaitGroup
	for i := 0; i < a.Conns; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: peerIP(i % a.Peers)}, Timeout: 5 * time.Second}
			for ctx.Err() == nil {
				a.once(ctx, &d)
				select {
				case <-ctx.Done():
				case <-time.After(a.Reopen + rand.N(a.Jitter+1)):
				}
			}
		}(i)
		if i%100 == 99 {
			time.Sleep(10 * time.Millisecond) // no SYN flood of our own
		}
	}
	wg.Wait()
}

// peerIP is the source address of attack peer i: 127.0.0.2 onwards, never
// 127.0.0.1, the good client's, so that a per-peer bound that refuses the
// attack does not refuse the good client.
func peerIP(i int) net.IP { return net.IPv4(127, 0, byte(i/250), byte(2+i%250)) }

func (a *attacker) once(ctx context.Context, d *net.Dialer) {
	c, err := d.DialContext(ctx, "tcp", a.Addr)
	if err != nil {
		if ctx.Err() == nil {
			a.dialFailed.Add(1)
		}
		return
	}
	a.opened.Add(1)
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	defer c.Close()
	head := "POST /api/vendor/v1/orders HTTP/1.1\r\nHost: gateway\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(a.Body) + "\r\n\r\n"
	// The bytes sent one a second: none (headers), the body after the
	// headers (slowbody), or the headers themselves (slowheaders).
	next := func(int) byte { return 'x' }
	n := a.Body
	if a.Mode == "stall" {
		// A first flight cut short: a handshake record announcing 512
		// bytes of which 43 come, or a request head without its end.
		first := "GET /api/vendor/v1/me HTTP/1.1\r\nHost: gateway\r\n"
		if a.TLS {
			first = "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + strings.Repeat("r", 32)
		}
		if _, err := io.WriteString(c, first); err != nil {
			return
		}
	} else if a.Mode == "slowheaders" {
		next, n = func(i int) byte { return head[i] }, len(head)
	} else if _, err := io.WriteString(c, head); err != nil {
		return
	}
	if a.Mode != "headers" && a.Mode != "stall" {
		go func() {
			for i := 0; i < n; i++ {
				if _, err := c.Write([]byte{next(i)}); err != nil {
					return
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Second):
				}
			}
		}()
	}
	// Read the answer if there is one; the connection stays open until the
	// gateway closes it or the attack ends.
	br := bufio.NewReader(c)
	line, err := br.ReadString('\n')
	if err == nil && strings.HasPrefix(line, "HTTP/1.1 ") && len(line) >= 12 {
		a.answered.Add(1)
		code, _ := strconv.Atoi(line[9:12])
		a.statusMu.Lock()
		a.statuses[code]++
		a.statusMu.Unlock()
		_, _ = io.Copy(io.Discard, br)
		return
	}
	if ctx.Err() == nil {
		a.cut.Add(1)
	}
}

func (a *attacker) counts() attackCounts {
	a.statusMu.Lock()
	defer a.statusMu.Unlock()
	return attackCounts{Opened: a.opened.Load(), Answered: a.answered.Load(), Cut: a.cut.Load(), DialFailed: a.dialFailed.Load(),
		Statuses: a.statuses}
}

func (c attackCounts) statusList() string {
	var parts []string
	for code, n := range c.Statuses {
		parts = append(parts, fmt.Sprintf("%d×%d", n, code))
	}
	slices.Sort(parts)
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

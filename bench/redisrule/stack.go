package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"vendorgate/bench/internal/childproc"
)

// redisProc is one redis-server of a cell, started as the cell asks: on
// the shared cores or pinned to a core of its own, plain or over TLS.
type redisProc struct {
	proc *childproc.Proc
	port int
	tls  bool
	cert string // the TLS certificate (also the CA redis-cli trusts)
}

// startRedis starts redis-server in dir on a free port. cpu, when not
// empty, pins it (taskset -c cpu). Redis' slowlog keeps every command it
// ran for slowUS or more (its own measure of a command's time) and its
// latency monitor every event past a millisecond.
func startRedis(dir string, cpu string, useTLS bool, slowUS int) (*redisProc, error) {
	addr, err := childproc.FreeAddr()
	if err != nil {
		return nil, err
	}
	_, p, _ := strings.Cut(addr, ":")
	port, _ := strconv.Atoi(p)
	args := []string{"--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir,
		"--slowlog-log-slower-than", strconv.Itoa(slowUS), "--slowlog-max-len", "100000", "--latency-monitor-threshold", "1"}
	r := &redisProc{port: port, tls: useTLS}
	if useTLS {
		cert, key, err := selfSigned(dir)
		if err != nil {
			return nil, err
		}
		r.cert = cert
		args = append(args, "--port", "0", "--tls-port", p, "--tls-cert-file", cert, "--tls-key-file", key,
			"--tls-ca-cert-file", cert, "--tls-auth-clients", "no")
	} else {
		args = append(args, "--port", p)
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, err
	}
	if cpu != "" {
		args = append([]string{"-c", cpu, bin}, args...)
		if bin, err = exec.LookPath("taskset"); err != nil {
			return nil, err
		}
	}
	if r.proc, err = childproc.Start(dir, "redis", nil, bin, args...); err != nil {
		return nil, err
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if out, err := r.cli("PING"); err == nil && strings.TrimSpace(out) == "PONG" {
			return r, nil
		}
		if time.Now().After(deadline) {
			r.proc.Kill()
			return nil, fmt.Errorf("redis-server did not answer PING: %s", r.proc.Tail())
		}
	}
}

// url is the gateway's redis.url for r (through addr when not empty: the
// black hole's proxy).
func (r *redisProc) url(addr string) string {
	if addr == "" {
		addr = "127.0.0.1:" + strconv.Itoa(r.port)
	}
	if r.tls {
		return "rediss://" + addr + "/0?skip_verify=true"
	}
	return "redis://" + addr + "/0"
}

func (r *redisProc) addr() string { return "127.0.0.1:" + strconv.Itoa(r.port) }

// cli runs redis-cli against r.
func (r *redisProc) cli(args ...string) (string, error) {
	base := []string{"-h", "127.0.0.1", "-p", strconv.Itoa(r.port)}
	if r.tls {
		base = append(base, "--tls", "--cacert", r.cert, "--insecure")
	}
	cmd := exec.Command("redis-cli", append(base, args...)...)
	out, err := cmd.Output()
	return string(out), err
}

// slow is Redis' own account of the cell: how many commands it ran for
// the slowlog threshold or more, and the longest command (LATENCY, ms).
func (r *redisProc) slow() (slowlog int, longestMS int, err error) {
	out, err := r.cli("SLOWLOG", "LEN")
	if err != nil {
		return 0, 0, err
	}
	slowlog, _ = strconv.Atoi(strings.TrimSpace(out))
	out, err = r.cli("LATENCY", "HISTORY", "command")
	if err != nil {
		return slowlog, 0, err
	}
	// Pairs of lines: a unix time, then the latency in ms.
	lines := strings.Fields(out)
	for i := 1; i < len(lines); i += 2 {
		if v, err := strconv.Atoi(lines[i]); err == nil && v > longestMS {
			longestMS = v
		}
	}
	return slowlog, longestMS, nil
}

func (r *redisProc) signal(sig syscall.Signal) error {
	return syscall.Kill(r.proc.Pid(), sig)
}

func (r *redisProc) stop() {
	_ = r.signal(syscall.SIGCONT)
	r.proc.Kill()
}

// selfSigned writes a self-signed certificate for 127.0.0.1 into dir.
func selfSigned(dir string) (certFile, keyFile string, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "redisrule"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, DNSNames: []string{"localhost"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return "", "", err
	}
	kd, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", "", err
	}
	certFile, keyFile = filepath.Join(dir, "redis.crt"), filepath.Join(dir, "redis.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return "", "", err
	}
	return certFile, keyFile, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd}), 0o600)
}

// spin starts n processes that each spin on a core (pinned to cpu when
// not empty) and returns the function that kills them.
func spin(n int, cpu string) (stop func(), err error) {
	var cmds []*exec.Cmd
	stop = func() {
		for _, c := range cmds {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	}
	for i := 0; i < n; i++ {
		c := exec.Command("sh", "-c", "while :; do :; done")
		if cpu != "" {
			c = exec.Command("taskset", "-c", cpu, "sh", "-c", "while :; do :; done")
		}
		if err := c.Start(); err != nil {
			stop()
			return nil, err
		}
		cmds = append(cmds, c)
	}
	return stop, nil
}

// cgroupCPU is the CPU controller this machine offers: cgroup v1's (the
// unified v2 hierarchy here has no cpu controller). cpu.cfs_quota_us is the
// same CFS bandwidth control as v2's cpu.max.
const cgroupCPU = "/sys/fs/cgroup/cpu"

// quota holds pid to share of a CPU (quota x 100ms per 100ms) in a cgroup
// of its own, and returns the function that moves it back and removes the
// group.
func quota(pid int, share float64, name string) (release func(), err error) {
	if _, err := os.Stat(filepath.Join(cgroupCPU, "cpu.cfs_quota_us")); err != nil {
		return nil, errors.New("no cgroup cpu controller at " + cgroupCPU)
	}
	dir := filepath.Join(cgroupCPU, name)
	if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
		return nil, err
	}
	write := func(name, v string) error { return os.WriteFile(filepath.Join(dir, name), []byte(v), 0o644) }
	release = func() {
		_ = os.WriteFile(filepath.Join(cgroupCPU, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644)
		for i := 0; i < 50 && syscall.Rmdir(dir) != nil; i++ {
			time.Sleep(10 * time.Millisecond)
		}
	}
	for _, kv := range [][2]string{{"cpu.cfs_period_us", "100000"}, {"cpu.cfs_quota_us", strconv.Itoa(int(share * 100000))},
		{"cgroup.procs", strconv.Itoa(pid)}} {
		if err := write(kv[0], kv[1]); err != nil {
			release()
			return nil, fmt.Errorf("cgroup %s: %w", kv[0], err)
		}
	}
	return release, nil
}

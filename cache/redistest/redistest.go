// Package redistest runs a real redis-server for tests, on a free loopback port,
// with no persistence. A test that needs it skips when redis-server is not on PATH,
// and fails instead when IMAGE_RESOLVER_REQUIRE_REDIS=1 (CI installs it).
package redistest

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/internal/testtls"
)

// RequireEnv, set to 1, makes a missing redis-server fail the tests that need it.
const RequireEnv = "IMAGE_RESOLVER_REQUIRE_REDIS"

// Server is a redis-server process on 127.0.0.1.
type Server struct {
	Addr string // 127.0.0.1:PORT, the same across Stop and Start
	// CAFile is, for a server started by StartTLS, the PEM certificate of the
	// test CA that signed the one it serves (for 127.0.0.1, ::1 and localhost),
	// to trust.
	CAFile string

	t    testing.TB
	bin  string
	dir  string
	args []string

	mu  sync.Mutex
	cmd *exec.Cmd
}

// Start runs redis-server until the test ends. extra are further redis-server
// arguments (e.g. "--requirepass", "secret").
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	return start(t, false, extra)
}

// StartTLS runs redis-server speaking only TLS, with a certificate for
// 127.0.0.1, ::1 and localhost signed by a test CA (CAFile).
func StartTLS(t testing.TB, extra ...string) *Server {
	t.Helper()
	return start(t, true, extra)
}

func start(t testing.TB, useTLS bool, extra []string) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv(RequireEnv) == "1" {
			t.Fatalf("redis-server not found on PATH and %s=1: install it (Debian: apt-get install redis-server)", RequireEnv)
		}
		t.Skipf("redis-server not found on PATH (install it, or set %s=1 to make this a failure)", RequireEnv)
	}
	s := &Server{t: t, bin: bin, dir: t.TempDir(), args: extra}
	if useTLS {
		if err := s.writeCert(); err != nil {
			t.Fatal(err)
		}
	}
	var lastErr error
	for range 5 { // a free port may be taken between finding and binding it
		port, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if lastErr = s.start(); lastErr == nil {
			t.Cleanup(s.Stop)
			return s
		}
	}
	t.Fatalf("redis-server: %v", lastErr)
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (s *Server) start() error {
	_, port, _ := net.SplitHostPort(s.Addr)
	args := []string{"--port", port}
	if s.CAFile != "" {
		args = []string{"--port", "0", "--tls-port", port, "--tls-cert-file", filepath.Join(s.dir, "cert.pem"),
			"--tls-key-file", filepath.Join(s.dir, "key.pem"), "--tls-auth-clients", "no"}
	}
	args = append(append(args, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", s.dir, "--logfile", "", "--loglevel", "warning"), s.args...)
	cmd := exec.Command(s.bin, args...)
	logPath := filepath.Join(s.dir, "redis.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd.Stdout, cmd.Stderr = logFile, logFile
	out := func() string { b, _ := os.ReadFile(logPath); return strings.TrimSpace(string(b)) }
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			return fmt.Errorf("exited (%v): %s", err, out())
		default:
		}
		if s.pingRaw() {
			s.mu.Lock()
			s.cmd = cmd
			s.mu.Unlock()
			return nil // the goroutine above reaps it when it is killed
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	<-exited
	return fmt.Errorf("did not answer PING within 10s: %s", out())
}

// pingRaw speaks RESP by hand: an answer to PING (PONG, or NOAUTH when a
// password is required) means the server is up.
func (s *Server) pingRaw() bool {
	c, err := s.dial(200 * time.Millisecond)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && (strings.HasPrefix(line, "+PONG") || strings.HasPrefix(line, "-NOAUTH"))
}

// Flush empties the server (FLUSHALL), as an operator or an eviction might.
func (s *Server) Flush(t testing.TB) {
	t.Helper()
	c, err := s.dial(time.Second)
	if err != nil {
		t.Fatalf("redis flush: %v", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("FLUSHALL\r\n")); err != nil {
		t.Fatalf("redis flush: %v", err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "+OK") {
		t.Fatalf("redis flush: %q %v", line, err)
	}
}

// advanceScript shortens every key's remaining TTL by ARGV[1] ms, deleting the
// keys whose TTL ends within it; keys without a TTL are left. It returns how many
// keys it deleted.
const advanceScript = `local d = tonumber(ARGV[1])
local gone = 0
for _, k in ipairs(redis.call("KEYS", "*")) do
  local p = redis.call("PTTL", k)
  if p > 0 then
    if p <= d then
      redis.call("DEL", k)
      gone = gone + 1
    else
      redis.call("PEXPIRE", k, p - d)
    end
  end
end
return gone`

// Advance makes d pass for the server's keys, as far as a client can tell:
// every key's remaining TTL is d shorter, and a key whose TTL ends within d is
// gone, as if it had expired. A test that moves a cache's injected clock on by d
// moves the shared tier's with it, rather than sleeping through a real TTL. It
// returns how many keys expired.
func (s *Server) Advance(t testing.TB, d time.Duration) int {
	t.Helper()
	reply := s.command(t, "EVAL", advanceScript, "0", strconv.FormatInt(d.Milliseconds(), 10))
	n, err := strconv.Atoi(strings.TrimPrefix(reply, ":"))
	if err != nil {
		t.Fatalf("redis advance: reply %q", reply)
	}
	return n
}

// command sends one command and returns its one-line reply (a status, an integer
// or a bulk string's length line); an error reply fails the test.
func (s *Server) command(t testing.TB, args ...string) string {
	t.Helper()
	c, err := s.dial(time.Second)
	if err != nil {
		t.Fatalf("redis %s: %v", args[0], err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		t.Fatalf("redis %s: %v", args[0], err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	line = strings.TrimRight(line, "\r\n")
	if err != nil || strings.HasPrefix(line, "-") {
		t.Fatalf("redis %s: %q %v", args[0], line, err)
	}
	return line
}

// Stop kills the server (SIGKILL: as if its pod died) and waits until its port
// refuses connections. Safe to call when stopped.
func (s *Server) Stop() {
	s.mu.Lock()
	cmd := s.cmd
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	for range 500 {
		c, err := net.DialTimeout("tcp", s.Addr, 50*time.Millisecond)
		if err != nil {
			return
		}
		c.Close()
		time.Sleep(10 * time.Millisecond)
	}
}

// Restart starts a stopped server again on the same address, empty.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	var err error
	for range 50 { // the port can linger a moment after the kill
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.t.Fatalf("redis-server restart on %s: %v", s.Addr, err)
}

// dial connects as a client, over TLS for a StartTLS server.
func (s *Server) dial(timeout time.Duration) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout}
	if s.CAFile == "" {
		return d.Dial("tcp", s.Addr)
	}
	caPEM, err := os.ReadFile(s.CAFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	return tls.DialWithDialer(d, "tcp", s.Addr, &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
}

// writeCert writes a test CA (CAFile), and a certificate it signed for
// 127.0.0.1, ::1 and localhost with its key, for redis-server.
func (s *Server) writeCert() error {
	certs, err := testtls.New("redistest")
	if err != nil {
		return err
	}
	chain, key, err := certs.ServerPEM()
	if err != nil {
		return err
	}
	s.CAFile = filepath.Join(s.dir, "ca.pem")
	if err := os.WriteFile(s.CAFile, certs.CAPEM(), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(s.dir, "cert.pem"), chain, 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(s.dir, "key.pem"), key, 0o600)
}

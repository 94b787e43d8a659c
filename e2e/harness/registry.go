package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// DefaultMaxTags is the tag page size the harness configures (distribution's
// `tags.maxtags`): small, so every resolution of a repository with more tags than this
// has to follow the Link header.
const DefaultMaxTags = 2

// DemoHost is the registry host the sample apps write; IMAGE_RESOLVER_REGISTRIES_CONFIG
// maps it to a Registry's loopback address.
const DemoHost = "registry.demo.local"

// Registry is a running CNCF distribution registry (`registry serve`) on 127.0.0.1
// with in-memory storage, no auth and plain HTTP.
type Registry struct {
	// Host is "127.0.0.1:PORT".
	Host    string
	MaxTags int

	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	stopped bool
	mu      sync.Mutex
}

var running struct {
	sync.Mutex
	all []*Registry
}

func stopAllRegistries() {
	running.Lock()
	all := running.all
	running.all = nil
	running.Unlock()
	for _, r := range all {
		r.Stop()
	}
}

// RegistryBinary is the registry binary `make e2e-registry` builds:
// <repo>/.cache/bin/registry, or E2E_REGISTRY_BIN.
func RegistryBinary() string {
	if v := os.Getenv("E2E_REGISTRY_BIN"); v != "" {
		return v
	}
	return filepath.Join(state.repoRoot, ".cache", "bin", "registry")
}

// StartRegistry starts a registry on a free loopback port with tags.maxtags =
// DefaultMaxTags and waits until GET /v2/ answers 200. It is killed at the end of the
// test. A missing binary fails the test and says how to build it.
func StartRegistry(t testing.TB) *Registry {
	t.Helper()
	return StartRegistryMaxTags(t, DefaultMaxTags)
}

// StartRegistryMaxTags is StartRegistry with another tag page size.
func StartRegistryMaxTags(t testing.TB, maxTags int) *Registry {
	t.Helper()
	bin := RegistryBinary()
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("the e2e registry binary %s is missing: run `make e2e-registry` in the repository root first "+
			"(it runs e2e/scripts/build-registry.sh, which builds the distribution release e2e/build/registry/go.mod requires): %v", bin, err)
	}
	var lastErr error
	// A free port can be taken between picking and binding it: retry a few times.
	for attempt := 0; attempt < 3; attempt++ {
		r, err := startRegistry(bin, t.TempDir(), maxTags)
		if err == nil {
			t.Cleanup(r.Stop)
			return r
		}
		lastErr = err
	}
	t.Fatalf("starting the registry: %v", lastErr)
	return nil
}

func startRegistry(bin, dir string, maxTags int) (*Registry, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	host := fmt.Sprintf("127.0.0.1:%d", port)
	// Keys from distribution v3's configuration package (configuration.go):
	// storage.inmemory, http.addr, tags.maxtags (clamps the `n` a client asks for on
	// GET /v2/<name>/tags/list and answers with a Link header for the rest; without n
	// every tag comes in one page), log.accesslog (Apache combined lines on stdout,
	// which Requests reads).
	config := fmt.Sprintf(`version: 0.1
log:
  level: warn
  accesslog:
    disabled: false
storage:
  inmemory: {}
  delete:
    enabled: true
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: %s
  secret: e2e-not-a-secret
  headers:
    X-Content-Type-Options: [nosniff]
tags:
  maxtags: %d
`, host, maxTags)
	cfgPath := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfgPath, []byte(config), 0o644); err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "registry.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "serve", cfgPath)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	// Keep the registry's environment minimal: REGISTRY_* variables would override
	// the config file.
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir}
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	r := &Registry{Host: host, MaxTags: maxTags, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		logFile.Close()
		close(r.done)
	}()
	running.Lock()
	running.all = append(running.all, r)
	running.Unlock()

	if err := r.waitReady(15 * time.Second); err != nil {
		r.Stop()
		return nil, err
	}
	return r, nil
}

func (r *Registry) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	client := &http.Client{Timeout: time.Second}
	for {
		select {
		case <-r.done:
			return fmt.Errorf("registry exited before answering /v2/: %s", r.LogTail())
		default:
		}
		resp, err := client.Get("http://" + r.Host + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("GET /v2/: %s", resp.Status)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("registry on %s did not answer /v2/ within %s: %v; log: %s", r.Host, timeout, err, r.LogTail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop kills the registry and waits for it to exit; it is safe to call twice. The
// in-memory content is gone afterwards.
func (r *Registry) Stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return
	}
	r.stopped = true
	if r.cmd.Process != nil {
		_ = r.cmd.Process.Kill()
	}
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
	}
}

// Running reports whether the registry process is still up.
func (r *Registry) Running() bool {
	select {
	case <-r.done:
		return false
	default:
		return true
	}
}

// LogTail returns the end of the registry's log.
func (r *Registry) LogTail() string {
	data, err := os.ReadFile(r.logPath)
	if err != nil {
		return err.Error()
	}
	// Errors matter here, not the access log.
	var lines []string
	for _, line := range strings.Split(string(data), "\n") {
		if line != "" && !accessLine.MatchString(line) {
			lines = append(lines, line)
		}
	}
	out := strings.Join(lines, "\n")
	const max = 4000
	if len(out) > max {
		out = out[len(out)-max:]
	}
	return out
}

// Request is one line of the registry's access log.
type Request struct {
	Method string
	URI    string // path and query
	Status int
}

// accessLine matches the request part of a line of the access log. distribution v3
// wraps its handler in gorilla/handlers' CombinedLoggingHandler writing to stdout
// (registry.NewRegistry): one line per request, written with a single write once the
// handler has returned:
//
//	127.0.0.1 - - [30/Nov/2026:10:15:43 +0000] "GET /v2/demo/web/tags/list?n=1000 HTTP/1.1" 404 116 "" "curl/7.88.1"
//
// The URI is escaped (no spaces; '"' and '\' backslashed), so \S+ takes all of it.
// The registry's own log lines (logrus, here warnings and errors) quote the URI as
// http.request.uri="..." and never have this shape.
var accessLine = regexp.MustCompile(`"([A-Z]+) (\S+) HTTP/[0-9.]+" ([0-9]{3}) `)

// syncQuery marks the requests Sync makes; Requests leaves them out, so counts are
// of what clients other than the harness asked.
const syncQuery = "e2e-sync="

// Requests returns the requests the registry has logged so far, oldest first,
// without Sync's own. Only complete lines count: a line the registry is writing
// while the log is read is left for the next call.
//
// A line is written only once the handler has returned, while net/http puts a
// response on the wire as the handler writes it, whenever its buffers fill: a client
// can have all of an answer before its line is in the log, so a count taken right
// after a client finished may miss its last requests. Take marks with Sync.
func (r *Registry) Requests() []Request {
	data, err := os.ReadFile(r.logPath)
	if err != nil {
		return nil
	}
	if i := bytes.LastIndexByte(data, '\n'); i >= 0 {
		data = data[:i+1]
	} else {
		data = nil
	}
	var out []Request
	for _, line := range strings.Split(string(data), "\n") {
		m := accessLine.FindStringSubmatch(line)
		if m == nil || strings.Contains(m[2], syncQuery) {
			continue
		}
		status, _ := strconv.Atoi(m[3])
		out = append(out, Request{Method: m[1], URI: m[2], Status: status})
	}
	return out
}

// syncQuietPeriod is how long the access log must stay unchanged after Sync's own
// request is logged.
const syncQuietPeriod = 150 * time.Millisecond

var syncSeq atomic.Int64

// Sync returns len(Requests()) once every request a client has had its answer to
// is in the access log, for counting requests exactly between two points of a test:
//
//	mark := reg.Sync(t)
//	... renders ...
//	reqs := reg.Requests()[mark:reg.Sync(t)]
//
// It sends its own GET /v2/?e2e-sync=N (left out of Requests) and waits until that
// is logged, so the registry has taken every request sent before it; then it waits
// until the log has not grown for syncQuietPeriod, for a request whose answer was
// on the wire before its handler returned and whose line is still to be written.
// A client that keeps asking fails the test after 10s.
func (r *Registry) Sync(t testing.TB) int {
	t.Helper()
	uri := fmt.Sprintf("/v2/?%s%d", syncQuery, syncSeq.Add(1))
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get("http://" + r.Host + uri)
	if err != nil {
		t.Fatalf("registry sync request: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()

	deadline := time.Now().Add(10 * time.Second)
	logged := func() bool {
		data, err := os.ReadFile(r.logPath)
		return err == nil && bytes.Contains(data, []byte(" "+uri+" HTTP/"))
	}
	for !logged() {
		if time.Now().After(deadline) {
			t.Fatalf("registry on %s did not log %s within 10s; log: %s", r.Host, uri, r.LogTail())
		}
		time.Sleep(5 * time.Millisecond)
	}
	n, since := len(r.Requests()), time.Now()
	for time.Since(since) < syncQuietPeriod {
		time.Sleep(10 * time.Millisecond)
		if m := len(r.Requests()); m != n {
			if time.Now().After(deadline) {
				t.Fatalf("registry on %s keeps logging requests (%d, then %d): something is still asking it", r.Host, n, m)
			}
			n, since = m, time.Now()
		}
	}
	return n
}

// CountRequests counts the requests after the first skip whose method is method and
// whose URI starts with prefix.
func (r *Registry) CountRequests(skip int, method, prefix string) int {
	reqs := r.Requests()
	if skip > len(reqs) {
		skip = len(reqs)
	}
	n := 0
	for _, q := range reqs[skip:] {
		if q.Method == method && strings.HasPrefix(q.URI, prefix) {
			n++
		}
	}
	return n
}

// Seed pushes a registry scenario (a YAML file of the main module, e.g.
// testdata/registry/e2e.yaml) into the registry with the main module's demo command:
// `go run ./cmd/demo --seed-remote HOST:PORT --scenario FILE`, run in the repository
// root (the command is built once per test run, then executed).
func (r *Registry) Seed(t testing.TB, scenario string) {
	t.Helper()
	abs := scenario
	if !filepath.IsAbs(abs) {
		abs = filepath.Join(state.repoRoot, scenario)
	}
	if _, err := os.Stat(abs); err != nil {
		t.Fatalf("registry scenario %s is missing: %v", abs, err)
	}
	demo := DemoBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, demo, "--seed-remote", r.Host, "--scenario", scenario)
	cmd.Dir = state.repoRoot
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("seeding %s with %s (go run ./cmd/demo --seed-remote %s --scenario %s): %v\n%s\nregistry log: %s",
			r.Host, scenario, r.Host, scenario, err, strings.TrimSpace(out.String()), r.LogTail())
	}
	t.Logf("seeded %s from %s in %s", r.Host, scenario, time.Since(start).Round(time.Millisecond))
}

// RegistriesConfig is the resolver's registries file mapping DemoHost to this
// registry over plain HTTP. WriteRegistriesConfig writes it; UseRegistriesConfig also
// points IMAGE_RESOLVER_REGISTRIES_CONFIG at it for the rest of the test.
func (r *Registry) RegistriesConfig() string {
	return fmt.Sprintf("registries:\n  - prefix: %s\n    api: %q\n    insecure: true\n", DemoHost, r.Host)
}

// RegistriesConfigEnv names the resolver's registries config file.
const RegistriesConfigEnv = "IMAGE_RESOLVER_REGISTRIES_CONFIG"

// WriteRegistriesConfig writes RegistriesConfig to a temp file and returns its path.
func (r *Registry) WriteRegistriesConfig(t testing.TB) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "registries.yaml")
	if err := os.WriteFile(p, []byte(r.RegistriesConfig()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// UseRegistriesConfig writes RegistriesConfig to a temp file and sets
// IMAGE_RESOLVER_REGISTRIES_CONFIG for the rest of the test. The generate process
// inherits it: the cmp-server runs the plugin with its own environment plus Argo CD's
// variables.
func (r *Registry) UseRegistriesConfig(t *testing.T) string {
	t.Helper()
	p := r.WriteRegistriesConfig(t)
	t.Setenv(RegistriesConfigEnv, p)
	return p
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	addr, ok := l.Addr().(*net.TCPAddr)
	if !ok {
		return 0, errors.New("not a TCP address")
	}
	return addr.Port, nil
}

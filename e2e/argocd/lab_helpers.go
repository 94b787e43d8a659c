package argocde2e

// The lab's helpers.

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Ports are picked below Linux's ephemeral range (32768-60999 by default), so that no
// outgoing connection takes one between the pick and the process's bind, and never
// twice in one test binary (two labs start at once).
var (
	portsMu   sync.Mutex
	portsUsed = map[int]bool{}
)

func freePort() (int, error) {
	ps, err := freePorts(1)
	if err != nil {
		return 0, err
	}
	return ps[0], nil
}

func freePorts(n int) ([]int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	var ports []int
	for tries := 0; len(ports) < n; tries++ {
		if tries > 1000 {
			return nil, errors.New("no free port in 20000-32000")
		}
		p := 20000 + mrand.IntN(12000)
		if portsUsed[p] {
			continue
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		ln.Close()
		portsUsed[p] = true
		ports = append(ports, p)
	}
	return ports, nil
}

// waitFor polls fn every 300ms until it returns nil, the process p (if any) exits,
// or limit passes.
func waitFor(limit time.Duration, what string, p *Proc, fn func() error) error {
	deadline := time.Now().Add(limit)
	var last error
	for {
		if last = fn(); last == nil {
			return nil
		}
		if p != nil && p.Exited() {
			return fmt.Errorf("%s: %w (%v); see %s", what, errExited, p.cmd.ProcessState, p.Log)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s: %v", limit, what, last)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

var httpClient = &http.Client{
	Timeout:   5 * time.Second,
	Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, // the lab's self-signed kube-apiserver
}

func httpOK(url string, header ...string) func() error {
	return func() error {
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := httpClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s: %s", url, resp.Status, bytes.TrimSpace(b))
		}
		return nil
	}
}

// baseEnv is the environment every process of the lab gets (nothing is inherited
// but PATH's system part): HOME and TMPDIR inside the run dir.
func (l *Lab) baseEnv(extra ...string) []string {
	path := strings.Join([]string{l.ArgoDir, l.Paths.Bin, "/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}, ":")
	env := []string{
		"PATH=" + path,
		"HOME=" + filepath.Join(l.Dir, "home"),
		"TMPDIR=" + filepath.Join(l.Dir, "tmp"),
		"KUBECONFIG=" + l.Kubeconfig,
		"ARGOCD_OPTS=--config " + l.CLIConfig,
		"LANG=C",
	}
	return append(env, extra...)
}

// Result is what a CLI command did.
type Result struct {
	Cmd            string
	Stdout, Stderr string
	Code           int
	Took           time.Duration
}

func (r Result) String() string {
	return fmt.Sprintf("$ %s\n(exit %d after %s)\n%s%s", r.Cmd, r.Code, r.Took.Round(time.Millisecond), r.Stdout, r.Stderr)
}

// Run runs a command of the lab (argocd, kubectl, git ...) with the lab's env and
// stdin, bounded by 3 minutes; every call is written to logs/cli.log.
func (l *Lab) Run(stdin string, argv ...string) Result { return l.run(nil, stdin, argv...) }

// run is Run with more environment (not logged: it may hold credentials).
func (l *Lab) run(extraEnv []string, stdin string, argv ...string) Result {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = l.baseEnv(extraEnv...)
	if lp, err := lookPathIn(argv[0], cmd.Env); err == nil {
		cmd.Path = lp
		cmd.Err = nil
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	t0 := time.Now()
	err := cmd.Run()
	r := Result{Cmd: strings.Join(argv, " "), Stdout: out.String(), Stderr: errb.String(), Took: time.Since(t0)}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.Code = ee.ExitCode()
	default:
		r.Code = -1
		r.Stderr += err.Error()
	}
	l.cliMu.Lock()
	fmt.Fprintf(l.cliLog, "[%s] %s\n", t0.Format("15:04:05.000"), r)
	l.cliMu.Unlock()
	return r
}

// lookPathIn finds name on env's PATH (exec.Command looks on the test's own PATH).
func lookPathIn(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	for _, e := range env {
		if p, ok := strings.CutPrefix(e, "PATH="); ok {
			for _, d := range filepath.SplitList(p) {
				f := filepath.Join(d, name)
				if st, err := os.Stat(f); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
					return f, nil
				}
			}
		}
	}
	return "", exec.ErrNotFound
}

// must runs a command that has to succeed.
func (l *Lab) must(stdin string, argv ...string) (string, error) {
	r := l.Run(stdin, argv...)
	if r.Code != 0 {
		return r.Stdout, fmt.Errorf("%s", r)
	}
	return r.Stdout, nil
}

func (l *Lab) start(name string, env []string, argv ...string) (*Proc, error) {
	if lp, err := lookPathIn(argv[0], env); err == nil {
		argv[0] = lp
	}
	return l.procs.Start(name, env, argv...)
}

// Package argocde2e runs a whole Argo CD on loopback, as processes, for tests: etcd,
// kube-apiserver, redis, a git server (git http-backend), the project's test registry
// (behind a TCP proxy the tests can switch off), the image-resolver sidecar exactly as
// deployed (argocd-image-resolver sidecar -- argocd-cmp-server, plugin.yaml from the
// checkout), argocd-repo-server, argocd-application-controller and argocd-server.
// Binaries come from .cache/e2e (e2e/build/build.sh); etcd, redis-server and git
// from the system (Debian packages).
package argocde2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"
)

// Paths says where the binaries and the checkout are.
type Paths struct {
	Root  string // the repository checkout (testdata/, plugin.yaml)
	Cache string // .cache/e2e (or $E2E_CACHE): bin/ and argocd-<version>/
	Bin   string // Cache/bin: kube-apiserver, kubectl, argocd-image-resolver, demo
}

// FindPaths locates the checkout from the test's working directory (e2e/argocd).
func FindPaths() (Paths, error) {
	wd, err := os.Getwd()
	if err != nil {
		return Paths{}, err
	}
	root := filepath.Clean(filepath.Join(wd, "..", ".."))
	if _, err := os.Stat(filepath.Join(root, "plugin.yaml")); err != nil {
		return Paths{}, fmt.Errorf("no plugin.yaml two levels above %s: run the tests from e2e/argocd", wd)
	}
	cache := os.Getenv("E2E_CACHE")
	if cache == "" {
		cache = filepath.Join(root, ".cache", "e2e")
	}
	return Paths{Root: root, Cache: cache, Bin: filepath.Join(cache, "bin")}, nil
}

// Versions lists the Argo CD versions of e2e/build/versions.txt, the one list that
// build.sh builds and the tests run.
func Versions(p Paths) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(p.Root, "e2e", "build", "versions.txt"))
	if err != nil {
		return nil, err
	}
	var vs []string
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		if l != "" && !strings.HasPrefix(l, "#") {
			vs = append(vs, l)
		}
	}
	return vs, nil
}

// CheckTools says what is missing to run a lab of version v; each missing piece is an
// error (a missing tool fails the tests, it never skips them).
func CheckTools(p Paths, v string) error {
	var errs []error
	argo := filepath.Join(p.Cache, "argocd-"+v)
	for _, f := range []string{
		filepath.Join(p.Bin, "kube-apiserver"), filepath.Join(p.Bin, "kubectl"),
		filepath.Join(p.Bin, "argocd-image-resolver"), filepath.Join(p.Bin, "argocd-image-resolver-generate"),
		filepath.Join(p.Bin, "demo"),
		filepath.Join(argo, "argocd"), filepath.Join(argo, "argocd-cmp-server"),
	} {
		if _, err := os.Stat(f); err != nil {
			errs = append(errs, fmt.Errorf("%s missing: run e2e/build/build.sh (make e2e does)", f))
		}
	}
	if strings.HasPrefix(v, "v3.") {
		// v3.6's repo-server runs it for every manifest request.
		if _, err := os.Stat(filepath.Join(argo, "git-verify-wrapper.sh")); err != nil {
			errs = append(errs, fmt.Errorf("%s/git-verify-wrapper.sh missing: run e2e/build/build.sh", argo))
		}
	}
	if _, err := os.Stat(filepath.Join(argo, "crds")); err != nil {
		errs = append(errs, fmt.Errorf("%s/crds missing: run e2e/build/build.sh", argo))
	}
	for _, t := range []string{"etcd", "redis-server", "git"} {
		if _, err := exec.LookPath(t); err != nil {
			errs = append(errs, fmt.Errorf("%s not on PATH: apt-get install etcd-server redis-server git (.ci/run does)", t))
		}
	}
	return errors.Join(errs...)
}

// Lab is one running Argo CD control plane.
type Lab struct {
	Version string
	Paths   Paths
	Dir     string // run dir: logs/, etcd/, pki/, git/, cmp/, home/, tmp/
	Logs    string
	procs   *Procs

	ArgoDir      string // argocd-<version>: argocd and its role names, git-verify-wrapper.sh
	Kubeconfig   string
	CLIConfig    string
	GitURL       string // http://127.0.0.1:PORT/apps.git: testdata/apps under apps/
	GitWork      string // the work tree pushed to GitURL
	RegistryHost string // the registry itself (demo --serve)
	Proxy        *TCPProxy
	ServerAddr   string
	RepoMetrics  string // http://127.0.0.1:PORT/metrics of repo-server
	SidecarAddr  string // 127.0.0.1:PORT of the resolver's /metrics and /readyz

	sidecar *Proc
	// SidecarTTLs are the sidecar's cache flags; 1s by default, so that a hard refresh
	// right after a push sees the new tag.
	SidecarTTLs []string
	// RefreshInterval is the sidecar's --refresh-interval (10s: the default 3m
	// scaled down).
	RefreshInterval string
	// SidecarKubeconfig is the sidecar's KUBECONFIG: the token of the
	// argocd-repo-server ServiceAccount, with only what deploy/rbac.yaml grants.
	SidecarKubeconfig string
	redisAddr         string
	kubeURL           string // https://127.0.0.1:PORT of kube-apiserver
	kubeToken         string
	gitSrv            *http.Server
	cliLog            *os.File
	cliMu             sync.Mutex
	StartedIn         time.Duration
}

const (
	adminPassword = "e2e-admin-pw"
	// DemoHost is the registry host of the sample apps; registries.yaml maps it to the proxy.
	DemoHost = "registry.demo.local"
	// PluginName is how Applications name the plugin (plugin.yaml's name-version).
	PluginName = "image-resolver-v1"
)

// StartLab starts a whole control plane of Argo CD version v in a fresh run dir. On
// error everything started is stopped again; the run dir (logs) stays.
func StartLab(p Paths, v string) (*Lab, error) { return launch(p, v, true) }

// StartKubeLab starts what the refresh loop needs without Argo CD's own processes:
// etcd and kube-apiserver with Argo CD's CRDs and config, the sidecar's
// ServiceAccount bound by deploy/rbac.yaml, the registry and the sidecar.
func StartKubeLab(p Paths, v string) (*Lab, error) { return launch(p, v, false) }

func launch(p Paths, v string, argo bool) (lab *Lab, err error) {
	t0 := time.Now()
	dir, err := os.MkdirTemp("", "argocd-e2e-"+v+"-")
	if err != nil {
		return nil, err
	}
	lab = &Lab{
		Version: v, Paths: p, Dir: dir, Logs: filepath.Join(dir, "logs"),
		ArgoDir:    filepath.Join(p.Cache, "argocd-"+v),
		Kubeconfig: filepath.Join(dir, "kubeconfig"), CLIConfig: filepath.Join(dir, "argocd-cli.config"),
		SidecarKubeconfig: filepath.Join(dir, "kubeconfig-sidecar"),
		SidecarTTLs:       []string{"--tag-ttl", "1s", "--head-ttl", "1s"},
		RefreshInterval:   "10s",
	}
	lab.procs = NewProcs(lab.Logs)
	for _, d := range []string{"logs", "etcd", "pki", "git", "tmp", "home", "cmp/config", "cmp/plugins", "argocd/tls", "argocd/ssh", "argocd/gpg"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	if lab.cliLog, err = os.Create(filepath.Join(lab.Logs, "cli.log")); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			lab.Stop(io.Discard)
			err = fmt.Errorf("%s: %w (logs in %s)", v, err, lab.Logs)
		}
	}()
	type step struct {
		name string
		fn   func() error
	}
	steps := []step{
		{"kube-apiserver", lab.startKube},
		{"argocd config", lab.applyArgoConfig},
		{"sidecar rbac", lab.grantSidecar},
	}
	if argo {
		steps = append(steps, step{"redis", lab.startRedis}, step{"git", lab.startGit})
	}
	steps = append(steps, step{"registry", lab.startRegistry}, step{"sidecar", lab.StartSidecar})
	if argo {
		steps = append(steps, step{"argocd", lab.startArgo})
	}
	for _, step := range steps {
		ts := time.Now()
		if err := step.fn(); err != nil {
			return lab, fmt.Errorf("%s: %w", step.name, err)
		}
		fmt.Fprintf(lab.cliLog, "=== step %s ready in %s\n", step.name, time.Since(ts).Round(time.Millisecond))
	}
	lab.StartedIn = time.Since(t0)
	return lab, nil
}

// Stop stops every process of the lab (reporting each to w) and the in-process git
// server. The run dir stays.
func (l *Lab) Stop(w io.Writer) {
	l.procs.StopAll(w, func(name string) time.Duration {
		if name == "sidecar" {
			// argocd-cmp-server ignores SIGTERM and the sidecar waits for it with no
			// deadline (a product bug, see e2e/README.md): do not wait the full grace.
			return 2 * time.Second
		}
		return 5 * time.Second
	})
	if l.gitSrv != nil {
		_ = l.gitSrv.Close()
	}
	if l.Proxy != nil {
		l.Proxy.Close()
	}
	if l.cliLog != nil {
		l.cliLog.Close()
	}
}

// ---------------------------------------------------------------------------------
// helpers

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
func (l *Lab) Run(stdin string, argv ...string) Result {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = l.baseEnv()
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

// ---------------------------------------------------------------------------------
// etcd and kube-apiserver

func (l *Lab) startKube() error {
	ports, err := freePorts(3)
	if err != nil {
		return err
	}
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	etcd, err := l.start("etcd", l.baseEnv(), "etcd", "--name", "e2e", "--data-dir", filepath.Join(l.Dir, "etcd"),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "e2e="+peerURL, "--listen-metrics-urls", "",
		"--logger", "zap", "--log-level", "warn", "--unsafe-no-fsync")
	if err != nil {
		return err
	}
	if err := waitFor(30*time.Second, "etcd /health", etcd, httpOK(etcdURL+"/health")); err != nil {
		return err
	}

	// Service-account keys and a static admin token (group system:masters).
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	pki := filepath.Join(l.Dir, "pki")
	if err := os.WriteFile(filepath.Join(pki, "sa.key"), pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(pki, "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644); err != nil {
		return err
	}
	tok := make([]byte, 24)
	_, _ = rand.Read(tok)
	token := hex.EncodeToString(tok)
	if err := os.WriteFile(filepath.Join(pki, "tokens.csv"), []byte(token+",e2e-admin,e2e-admin,system:masters\n"), 0o600); err != nil {
		return err
	}
	// No kube-controller-manager, scheduler or kubelet: objects are stored, pods never
	// run (Deployments stay Progressing), which Argo CD does not mind.
	// --endpoint-reconciler-type=none: the kubernetes Service's endpoint would be
	// 127.0.0.1, which the API refuses.
	kas, err := l.start("kube-apiserver", l.baseEnv(), "kube-apiserver",
		"--etcd-servers", etcdURL,
		"--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1", "--secure-port", fmt.Sprint(ports[2]),
		"--cert-dir", pki, "--token-auth-file", filepath.Join(pki, "tokens.csv"),
		"--authorization-mode", "RBAC",
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file", filepath.Join(pki, "sa.pub"),
		"--service-account-signing-key-file", filepath.Join(pki, "sa.key"),
		"--service-cluster-ip-range", "10.96.0.0/16", "--endpoint-reconciler-type", "none",
		"--disable-admission-plugins", "ServiceAccount",
		"--enable-priority-and-fairness=false", "--profiling=false")
	if err != nil {
		return err
	}
	kubeconfig := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: https://127.0.0.1:%d
    insecure-skip-tls-verify: true
users:
- name: e2e-admin
  user:
    token: %s
contexts:
- name: e2e
  context: {cluster: e2e, user: e2e-admin, namespace: argocd}
current-context: e2e
`, ports[2], token)
	if err := os.WriteFile(l.Kubeconfig, []byte(kubeconfig), 0o600); err != nil {
		return err
	}
	l.kubeURL, l.kubeToken = fmt.Sprintf("https://127.0.0.1:%d", ports[2]), token
	return waitFor(90*time.Second, "kube-apiserver /readyz", kas,
		httpOK(fmt.Sprintf("https://127.0.0.1:%d/readyz", ports[2]), "Authorization", "Bearer "+token))
}

// applyArgoConfig applies Argo CD's CRDs (from its module, copied by build.sh) and
// the config objects an install has.
func (l *Lab) applyArgoConfig() error {
	if _, err := l.must("", "kubectl", "create", "namespace", "argocd"); err != nil {
		return err
	}
	if _, err := l.must("", "kubectl", "apply", "--server-side", "-f", filepath.Join(l.ArgoDir, "crds")); err != nil {
		return err
	}
	if err := waitFor(30*time.Second, "the CRDs to be served", nil, func() error {
		_, err := l.must("", "kubectl", "get", "applications.argoproj.io,appprojects.argoproj.io", "-A")
		return err
	}); err != nil {
		return err
	}
	bcrypt, err := l.must("", "argocd", "account", "bcrypt", "--password", adminPassword)
	if err != nil {
		return err
	}
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	cm := func(name string, data string) string {
		return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: %s, namespace: argocd, labels: {app.kubernetes.io/name: %s, app.kubernetes.io/part-of: argocd}}\n%s---\n", name, name, data)
	}
	objs := cm("argocd-cm", "data:\n  admin.enabled: \"true\"\n  # no automatic re-compare during a test: refreshes are what the tests do\n  timeout.reconciliation: 600s\n") +
		cm("argocd-rbac-cm", "") + cm("argocd-cmd-params-cm", "") + cm("argocd-tls-certs-cm", "") +
		cm("argocd-ssh-known-hosts-cm", "") + cm("argocd-gpg-keys-cm", "") +
		fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata: {name: argocd-secret, namespace: argocd, labels: {app.kubernetes.io/name: argocd-secret, app.kubernetes.io/part-of: argocd}}
type: Opaque
stringData:
  admin.password: '%s'
  admin.passwordMtime: '%s'
  server.secretkey: '%s'
`, strings.TrimSpace(bcrypt), time.Now().UTC().Format(time.RFC3339), hex.EncodeToString(secret))
	_, err = l.must(objs, "kubectl", "apply", "-f", "-")
	return err
}

// grantSidecar gives the sidecar what an install gives it: the argocd-repo-server
// ServiceAccount (Argo CD's install creates it), deploy/rbac.yaml applied in the
// control-plane namespace, and a kubeconfig with a token of that ServiceAccount, so
// the refresh loop runs with exactly the rights the shipped RBAC grants.
func (l *Lab) grantSidecar() error {
	if _, err := l.must("", "kubectl", "-n", "argocd", "create", "serviceaccount", "argocd-repo-server"); err != nil {
		return err
	}
	if _, err := l.must("", "kubectl", "-n", "argocd", "apply", "-f", filepath.Join(l.Paths.Root, "deploy", "rbac.yaml")); err != nil {
		return err
	}
	token, err := l.must("", "kubectl", "-n", "argocd", "create", "token", "argocd-repo-server", "--duration", "6h")
	if err != nil {
		return err
	}
	kubeconfig := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster: {server: %s, insecure-skip-tls-verify: true}
users:
- name: argocd-repo-server
  user: {token: %s}
contexts:
- name: e2e
  context: {cluster: e2e, user: argocd-repo-server, namespace: argocd}
current-context: e2e
`, l.kubeURL, strings.TrimSpace(token))
	return os.WriteFile(l.SidecarKubeconfig, []byte(kubeconfig), 0o600)
}

// ---------------------------------------------------------------------------------
// redis, git, registry

func (l *Lab) redis() string { return l.redisAddr }

func (l *Lab) startRedis() error {
	port, err := freePort()
	if err != nil {
		return err
	}
	p, err := l.start("redis", l.baseEnv(), "redis-server", "--bind", "127.0.0.1", "--port", fmt.Sprint(port),
		"--save", "", "--appendonly", "no", "--dir", filepath.Join(l.Dir, "tmp"), "--protected-mode", "yes")
	if err != nil {
		return err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	l.redisAddr = addr
	return waitFor(20*time.Second, "redis", p, func() error {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Write([]byte("PING\r\n")); err != nil {
			return err
		}
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			return err
		}
		if !strings.HasPrefix(line, "+PONG") {
			return fmt.Errorf("redis said %q", line)
		}
		return nil
	})
}

// startGit serves Dir/git over smart HTTP from the test process (git http-backend as
// CGI, pushes allowed), and pushes one commit with the checkout's testdata/apps under
// apps/.
func (l *Lab) startGit() error {
	out, err := l.must("", "git", "--exec-path")
	if err != nil {
		return err
	}
	root := filepath.Join(l.Dir, "git")
	h := &cgi.Handler{
		Path: filepath.Join(strings.TrimSpace(out), "git-http-backend"),
		Env:  []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1", "REMOTE_USER=e2e"},
		// PATH only: HOME stays the run dir's (no user git config).
		InheritEnv: []string{"PATH"},
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	gitLog, err := os.Create(filepath.Join(l.Logs, "gitserver.log"))
	if err != nil {
		return err
	}
	l.gitSrv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(gitLog, "%s %s %s\n", time.Now().Format("15:04:05.000"), r.Method, r.URL.RequestURI())
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/git-receive-pack") {
			// As a git host does: a push webhook to Argo CD after the push.
			before := l.gitTip()
			h.ServeHTTP(w, r)
			l.pushWebhook(gitLog, before)
			return
		}
		h.ServeHTTP(w, r)
	})}
	go func() { _ = l.gitSrv.Serve(ln) }()
	l.GitURL = fmt.Sprintf("http://%s/apps.git", ln.Addr())

	bare := filepath.Join(root, "apps.git")
	l.GitWork = filepath.Join(l.Dir, "apps-work")
	if err := copyDir(filepath.Join(l.Paths.Root, "testdata", "apps"), filepath.Join(l.GitWork, "apps")); err != nil {
		return err
	}
	for _, c := range [][]string{
		{"git", "init", "-q", "--bare", "-b", "main", bare},
		{"git", "-C", bare, "config", "http.receivepack", "true"},
		{"git", "-C", l.GitWork, "init", "-q", "-b", "main"},
		{"git", "-C", l.GitWork, "add", "-A"},
		{"git", "-C", l.GitWork, "-c", "user.name=e2e", "-c", "user.email=e2e@127.0.0.1", "commit", "-q", "-m", "sample apps"},
		{"git", "-C", l.GitWork, "remote", "add", "origin", l.GitURL},
		{"git", "-C", l.GitWork, "push", "-q", "origin", "main"},
	} {
		if _, err := l.must("", c...); err != nil {
			return err
		}
	}
	return nil
}

// gitTip is the commit main of the lab's repository points at ("" before any).
func (l *Lab) gitTip() string {
	out, err := exec.Command("git", "-C", filepath.Join(l.Dir, "git", "apps.git"), "rev-parse", "--verify", "-q", "refs/heads/main").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// pushWebhook tells argocd-server about a push to main, with GitHub's push event
// (Argo CD's /api/webhook; no secret configured), as a git host would: Argo CD
// then refreshes the apps of that repository at once instead of at its next poll.
func (l *Lab) pushWebhook(log io.Writer, before string) {
	after := l.gitTip()
	if after == "" || after == before || l.ServerAddr == "" {
		return
	}
	var files []string
	if before != "" {
		out, _ := exec.Command("git", "-C", filepath.Join(l.Dir, "git", "apps.git"), "diff", "--name-only", before, after).Output()
		files = strings.Fields(string(out))
	}
	if before == "" {
		before = strings.Repeat("0", 40)
	}
	payload, _ := json.Marshal(map[string]any{
		"ref": "refs/heads/main", "before": before, "after": after,
		"repository": map[string]any{"html_url": strings.TrimSuffix(l.GitURL, ".git"), "default_branch": "main"},
		"commits":    []map[string]any{{"id": after, "modified": files}},
	})
	req, _ := http.NewRequest(http.MethodPost, "http://"+l.ServerAddr+"/api/webhook", bytes.NewReader(payload))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-GitHub-Event", "push")
	resp, err := httpClient.Do(req)
	if err != nil {
		fmt.Fprintf(log, "%s webhook: %v\n", time.Now().Format("15:04:05.000"), err)
		return
	}
	resp.Body.Close()
	fmt.Fprintf(log, "%s webhook push %s..%s (%d files): %s\n", time.Now().Format("15:04:05.000"), before[:7], after[:7], len(files), resp.Status)
}

func copyDir(src, dst string) error {
	return filepath.Walk(src, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		if info.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, info.Mode().Perm())
	})
}

var seededRE = regexp.MustCompile(`(?m)^registry (\S+) seeded`)

// startRegistry runs the project's test registry (resolve/registrytest through
// `demo --serve`, seeded from testdata/registry/demo.yaml) and a TCP proxy in front of
// it, which registries.yaml names for registry.demo.local: the tests switch the proxy
// off to take "the registry" down.
func (l *Lab) startRegistry() error {
	p, err := l.start("registry", l.baseEnv(), "demo", "--serve", "--scenario", filepath.Join(l.Paths.Root, "testdata", "registry", "demo.yaml"))
	if err != nil {
		return err
	}
	if err := waitFor(60*time.Second, "the registry to be seeded", p, func() error {
		b, _ := os.ReadFile(p.Log)
		m := seededRE.FindSubmatch(b)
		if m == nil {
			return errors.New("not yet")
		}
		l.RegistryHost = string(m[1])
		return nil
	}); err != nil {
		return err
	}
	if err := httpOK("http://" + l.RegistryHost + "/v2/")(); err != nil {
		return err
	}
	if l.Proxy, err = NewTCPProxy(l.RegistryHost); err != nil {
		return err
	}
	cfg := fmt.Sprintf("registries:\n  - prefix: %s\n    api: %s\n    insecure: true\n", DemoHost, l.Proxy.Addr)
	return os.WriteFile(l.registriesConfig(), []byte(cfg), 0o644)
}

func (l *Lab) registriesConfig() string { return filepath.Join(l.Dir, "registries.yaml") }

// SeedTag pushes repo:tag (linux/amd64 and linux/arm64) to the registry, as a CI
// pipeline would, with `demo --seed-remote`.
func (l *Lab) SeedTag(repo, tag string) error {
	f := filepath.Join(l.Dir, "tmp", "seed-"+tag+".yaml")
	sc := fmt.Sprintf("repositories:\n  %s:\n    tags:\n      - {tag: %q, created: %q, platforms: [linux/amd64, linux/arm64]}\n",
		repo, tag, time.Now().UTC().Format(time.RFC3339))
	if err := os.WriteFile(f, []byte(sc), 0o644); err != nil {
		return err
	}
	_, err := l.must("", "demo", "--seed-remote", "http://"+l.RegistryHost, "--scenario", f)
	return err
}

// ---------------------------------------------------------------------------------
// the sidecar and Argo CD

// StartSidecar starts the image-resolver sidecar as deployed: the daemon and, as its
// child, Argo CD's argocd-cmp-server serving the checkout's plugin.yaml on the plugins
// socket directory that repo-server shares. Short TTLs, so that a hard refresh right
// after a push sees the new tag. IMAGE_RESOLVER_DEFAULT_PLATFORMS=linux/amd64 stands
// for the pod's own architecture.
func (l *Lab) StartSidecar() error {
	plugin, err := os.ReadFile(filepath.Join(l.Paths.Root, "plugin.yaml"))
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(l.Dir, "cmp", "config", "plugin.yaml"), plugin, 0o644); err != nil {
		return err
	}
	sock := filepath.Join(l.Dir, "cmp", "plugins", PluginName+".sock")
	_ = os.Remove(sock)
	port, err := freePort()
	if err != nil {
		return err
	}
	l.SidecarAddr = fmt.Sprintf("127.0.0.1:%d", port)
	env := l.baseEnv(
		"ARGOCD_PLUGINSOCKFILEPATH="+filepath.Join(l.Dir, "cmp", "plugins"),
		"IMAGE_RESOLVER_REGISTRIES_CONFIG="+l.registriesConfig(),
		"IMAGE_RESOLVER_DEFAULT_PLATFORMS=linux/amd64",
		"KUBECONFIG="+l.SidecarKubeconfig,
	)
	p, err := l.start("sidecar", env, "argocd-image-resolver", "sidecar",
		"--socket", l.DaemonSocket(), "--refresh-interval", l.RefreshInterval,
		"--metrics-addr", l.SidecarAddr, "--registries-config", l.registriesConfig(),
		l.SidecarTTLs[0], l.SidecarTTLs[1], l.SidecarTTLs[2], l.SidecarTTLs[3],
		"--", filepath.Join(l.ArgoDir, "argocd-cmp-server"), "--config-dir-path", filepath.Join(l.Dir, "cmp", "config"),
		"--loglevel", "info", "--logformat", "json")
	if err != nil {
		return err
	}
	l.sidecar = p
	if err := waitFor(30*time.Second, "the resolver's /readyz", p, httpOK("http://"+l.SidecarAddr+"/readyz")); err != nil {
		return err
	}
	return waitFor(30*time.Second, "the CMP socket", p, func() error {
		st, err := os.Stat(sock)
		if err != nil {
			return err
		}
		if st.Mode()&os.ModeSocket == 0 {
			return fmt.Errorf("%s is not a socket", sock)
		}
		return nil
	})
}

// DaemonSocket is where the sidecar's daemon listens (IMAGE_RESOLVER_SOCKET of the
// CMP server it runs).
func (l *Lab) DaemonSocket() string { return filepath.Join(l.Dir, "cmp", "resolver.sock") }

// Sidecar is the running sidecar process.
func (l *Lab) Sidecar() *Proc { return l.sidecar }

// RestartSidecar KILLs the sidecar's process group (argocd-cmp-server ignores
// SIGTERM) and starts a new one: an empty registry cache.
func (l *Lab) RestartSidecar() error {
	l.sidecar.Stop(0)
	return l.StartSidecar()
}

func (l *Lab) startArgo() error {
	ports, err := freePorts(6)
	if err != nil {
		return err
	}
	repoAddr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	l.ServerAddr = fmt.Sprintf("127.0.0.1:%d", ports[3])
	l.RepoMetrics = fmt.Sprintf("http://127.0.0.1:%d/metrics", ports[1])
	// Out of a cluster, as argo-cd's own Procfile runs it.
	env := func(extra ...string) []string {
		return l.baseEnv(append([]string{
			"ARGOCD_FAKE_IN_CLUSTER=true", // https://kubernetes.default.svc = $KUBECONFIG
			"ARGOCD_TLS_DATA_PATH=" + filepath.Join(l.Dir, "argocd", "tls"),
			"ARGOCD_SSH_DATA_PATH=" + filepath.Join(l.Dir, "argocd", "ssh"),
			"ARGOCD_GNUPGHOME=" + filepath.Join(l.Dir, "argocd", "gpg"),
			"ARGOCD_GPG_ENABLED=false",
		}, extra...)...)
	}
	repo, err := l.start("repo-server", env("ARGOCD_PLUGINSOCKFILEPATH="+filepath.Join(l.Dir, "cmp", "plugins")),
		"argocd-repo-server", "--address", "127.0.0.1", "--port", fmt.Sprint(ports[0]),
		"--metrics-address", "127.0.0.1", "--metrics-port", fmt.Sprint(ports[1]),
		"--redis", l.redis(), "--loglevel", "info", "--logformat", "json")
	if err != nil {
		return err
	}
	if err := waitFor(60*time.Second, "repo-server /healthz", repo, httpOK(fmt.Sprintf("http://127.0.0.1:%d/healthz", ports[1]))); err != nil {
		return err
	}
	// The controller's metrics listener binds 0.0.0.0 (it has no flag for the host).
	ctrl, err := l.start("application-controller", env(),
		"argocd-application-controller", "--repo-server", repoAddr, "--redis", l.redis(),
		"--metrics-port", fmt.Sprint(ports[2]), "--loglevel", "info", "--logformat", "json")
	if err != nil {
		return err
	}
	srv, err := l.start("server", env(),
		"argocd-server", "--insecure", "--address", "127.0.0.1", "--port", fmt.Sprint(ports[3]),
		"--metrics-address", "127.0.0.1", "--metrics-port", fmt.Sprint(ports[4]),
		"--repo-server", repoAddr, "--redis", l.redis(), "--loglevel", "info", "--logformat", "json")
	if err != nil {
		return err
	}
	if err := waitFor(60*time.Second, "argocd-server /healthz", srv, httpOK("http://"+l.ServerAddr+"/healthz")); err != nil {
		return err
	}
	if err := waitFor(60*time.Second, "application-controller /metrics", ctrl, httpOK(fmt.Sprintf("http://127.0.0.1:%d/metrics", ports[2]))); err != nil {
		return err
	}
	return waitFor(30*time.Second, "argocd login", srv, func() error {
		_, err := l.must("", "argocd", "login", l.ServerAddr, "--plaintext", "--username", "admin", "--password", adminPassword)
		return err
	})
}

// Metrics returns the lines of the resolver's /metrics that start with prefix.
func (l *Lab) Metrics(prefix string) (string, error) {
	resp, err := httpClient.Get("http://" + l.SidecarAddr + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, prefix) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n"), nil
}

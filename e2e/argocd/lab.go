// Package argocde2e runs a whole Argo CD on loopback, as processes, for tests: etcd,
// kube-apiserver, redis, a git server (git http-backend), a Gitea (the forge of
// pull requests of pins), the project's test registry
// (behind a TCP proxy the tests can switch off), the image-resolver sidecar exactly as
// deployed (argocd-image-resolver sidecar -- argocd-cmp-server, plugin.yaml from the
// checkout), argocd-repo-server, argocd-application-controller and argocd-server.
// Binaries come from .cache/e2e (e2e/build/build.sh); etcd, redis-server and git
// from the system (Debian packages).
package argocde2e

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
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
		filepath.Join(argo, "argocd-applicationset-controller"),
		// The helm and kustomize this Argo CD version ships (build.sh tools), on the
		// repo-server's PATH: native apps render with them.
		filepath.Join(argo, "helm"), filepath.Join(argo, "kustomize"),
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
	// The forge of the pull-request scenario.
	bin, static := giteaPaths(p)
	if _, err := os.Stat(bin); err != nil {
		errs = append(errs, fmt.Errorf("%s missing: run `%s` (build.sh all does)", bin, GiteaBuild))
	}
	if _, err := os.Stat(filepath.Join(static, "options")); err != nil {
		errs = append(errs, fmt.Errorf("%s/options missing (Gitea's templates and options): run `%s`", static, GiteaBuild))
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
	// Gitea is the forge of pull requests of pins (nil in StartKubeLab's lab):
	// the sidecar's git.credentials and git.forges name it.
	Gitea *Gitea

	sidecar *Proc
	// SidecarTTLs are the sidecar's cache flags; 1s by default, so that a hard refresh
	// right after a push sees the new tag.
	SidecarTTLs []string
	// RefreshInterval is the sidecar's --refresh-interval (10s: the default 3m
	// scaled down).
	RefreshInterval string
	// SidecarArgs are more flags of the sidecar (a scenario's, e.g. --webhook-addr);
	// SidecarConfig, when set, is its IMAGE_RESOLVER_CONFIG instead of the lab's.
	SidecarArgs   []string
	SidecarConfig string
	// SidecarKubeconfig is the sidecar's KUBECONFIG: the token of the
	// argocd-repo-server ServiceAccount, with only what deploy/rbac.yaml grants.
	SidecarKubeconfig string
	// SigningKey is the PEM file of the ECDSA P-256 private key "CI" signs tags
	// with (SignTag); TrustKeyFile, its public half, is the sidecar's trust key
	// TrustKeyName. Both made at start, in the run dir.
	SigningKey, TrustKeyFile string
	redisAddr                string
	kubeURL                  string // https://127.0.0.1:PORT of kube-apiserver
	kubeToken                string
	gitSrv                   *http.Server
	cliLog                   *os.File
	cliMu                    sync.Mutex
	StartedIn                time.Duration
}

const (
	adminPassword = "e2e-admin-pw"
	// DemoHost is the registry host of the sample apps; registries.yaml maps it to the proxy.
	DemoHost = "registry.demo.local"
	// PluginName is how Applications name the plugin (plugin.yaml's name-version).
	PluginName = "image-resolver-v1"
	// TrustKeyName is the sidecar's trust key (IMAGE_RESOLVER_TRUST_KEYS) that
	// SignTag signs with: what an app's verify-key names.
	TrustKeyName = "ci"
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
		{"signing key", lab.makeSigningKey},
		{"kube-apiserver", lab.startKube},
		{"argocd config", lab.applyArgoConfig},
		{"sidecar rbac", lab.grantSidecar},
	}
	if argo {
		// Gitea migrates its database while the rest starts.
		steps = append(steps, step{"gitea start", lab.startGitea}, step{"redis", lab.startRedis}, step{"git", lab.startGit})
	}
	steps = append(steps, step{"registry", lab.startRegistry}, step{"sidecar", lab.StartSidecar})
	if argo {
		steps = append(steps, step{"argocd", lab.startArgo}, step{"gitea", lab.readyGitea})
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

package argocde2e

// The lab's the sidecar and Argo CD.

import (
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// StartSidecar starts the image-resolver sidecar as deployed: the daemon and, as its
// child, Argo CD's argocd-cmp-server serving the checkout's plugin.yaml on the plugins
// socket directory that repo-server shares. Short TTLs, so that a hard refresh right
// after a push sees the new tag. IMAGE_RESOLVER_DEFAULT_PLATFORMS=linux/amd64 stands
// for the pod's own architecture. The lab's git server is an allowed host of
// Kustomize remote bases. The public half of the lab's signing key is trust key
// TrustKeyName (also after RestartSidecar, which starts it the same way). In a
// lab with Gitea, its configuration file names Gitea as the forge of pull
// requests of pins, with the admin's token as forge token and git password.
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
		// the public key of the lab's "CI" (SignTag), for apps with verify-key ci
		"IMAGE_RESOLVER_TRUST_KEYS="+TrustKeyName+"="+l.TrustKeyFile,
	)
	switch {
	case l.SidecarConfig != "":
		env = append(env, "IMAGE_RESOLVER_CONFIG="+l.SidecarConfig)
	case l.Gitea != nil:
		// git.credentials and git.forges for the lab's Gitea
		env = append(env, "IMAGE_RESOLVER_CONFIG="+l.sidecarConfig())
	}
	if u, err := url.Parse(l.GitURL); err == nil && u.Host != "" {
		// the lab's git server, for apps whose Kustomize bases are remote
		env = append(env, "IMAGE_RESOLVER_KUSTOMIZE_REMOTE_HOSTS=http://"+u.Host)
	}
	argv := []string{"argocd-image-resolver", "sidecar",
		"--socket", l.DaemonSocket(), "--refresh-interval", l.RefreshInterval,
		"--metrics-addr", l.SidecarAddr, "--registries-config", l.registriesConfig()}
	argv = append(append(argv, l.SidecarTTLs...), l.SidecarArgs...)
	argv = append(argv, "--", filepath.Join(l.ArgoDir, "argocd-cmp-server"), "--config-dir-path", filepath.Join(l.Dir, "cmp", "config"),
		"--loglevel", "info", "--logformat", "json")
	p, err := l.start("sidecar", env, argv...)
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

// RestartSidecar stops the sidecar as a pod's termination does, SIGTERM and then,
// after a grace, SIGKILL to its process group (argocd-cmp-server ignores SIGTERM),
// and starts a new one: an empty registry cache. The grace lets the daemon save its
// watch list at stop; without it the restart would forget what changed since the
// last periodic save (10s), a loss a KILL is allowed but a pod's restart is not.
func (l *Lab) RestartSidecar() error {
	l.sidecar.Stop(restartGrace)
	return l.StartSidecar()
}

// restartGrace is how long RestartSidecar waits between SIGTERM and SIGKILL.
const restartGrace = 3 * time.Second

func (l *Lab) startArgo() error {
	ports, err := freePorts(9)
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
	// ApplicationSets (the multi-call binary's controller), as the install manifests run
	// it: it asks repo-server for git generators' directories and files.
	appset, err := l.start("applicationset-controller", env(),
		"argocd-applicationset-controller", "--argocd-repo-server", repoAddr,
		"--metrics-addr", fmt.Sprintf("127.0.0.1:%d", ports[6]), "--probe-addr", fmt.Sprintf("127.0.0.1:%d", ports[7]),
		"--webhook-addr", fmt.Sprintf("127.0.0.1:%d", ports[8]), "--loglevel", "info", "--logformat", "json")
	if err != nil {
		return err
	}
	// Its probe address serves no /healthz (no checks are added to it); /metrics is up
	// once the manager runs.
	if err := waitFor(60*time.Second, "applicationset-controller /metrics", appset, httpOK(fmt.Sprintf("http://127.0.0.1:%d/metrics", ports[6]))); err != nil {
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

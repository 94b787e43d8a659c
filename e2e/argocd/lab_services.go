package argocde2e

// The lab's redis, git, registry, and the signing key of its "CI".

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

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

// copyDir copies the tree src into dst.
func copyDir(src, dst string) error { return copyTree(src, dst, nil) }

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

// makeSigningKey makes the ECDSA P-256 key pair of "CI" in the run dir: the
// private key (PKCS #8 PEM) for SignTag, the public one (PKIX PEM, as cosign.pub)
// for the sidecar's trust keys.
func (l *Lab) makeSigningKey() error {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	priv, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(k.Public())
	if err != nil {
		return err
	}
	l.SigningKey = filepath.Join(l.Dir, "pki", TrustKeyName+".key")
	l.TrustKeyFile = filepath.Join(l.Dir, "pki", TrustKeyName+".pub")
	if err := os.WriteFile(l.SigningKey, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: priv}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(l.TrustKeyFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644)
}

// SignTag signs repo:tag's digest with the lab's signing key, as CI would with
// `cosign sign --key`: `demo --sign-remote` stores a key-mode Sigstore bundle
// that the registry's referrers API lists. The sidecar trusts it as TrustKeyName.
func (l *Lab) SignTag(repo, tag string) error {
	_, err := l.must("", "demo", "--sign-remote", "http://"+l.RegistryHost, "--image", repo+":"+tag,
		"--key", l.SigningKey, "--key-name", TrustKeyName)
	return err
}

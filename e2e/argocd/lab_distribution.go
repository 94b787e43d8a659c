package argocde2e

import (
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Distribution is a CNCF distribution registry (the binary `make e2e-registry`
// builds, .cache/bin/registry) with its notifications sent to the sidecar's
// registry webhook listener, as an operator configures a registry for the
// resolver (docs/freshness.md, "Registry webhooks").
type Distribution struct {
	Host string // 127.0.0.1:PORT, plain HTTP, in-memory storage
	proc *Proc
}

// StartDistribution starts a distribution registry whose notifications go to
// hookURL with Authorization: Bearer secret. It is stopped with the lab.
func (l *Lab) StartDistribution(hookURL, secret string) (*Distribution, error) {
	bin := filepath.Join(l.Paths.Root, ".cache", "bin", "registry")
	if v := os.Getenv("E2E_REGISTRY_BIN"); v != "" {
		bin = v
	}
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("the distribution registry %s is missing: run `make e2e-registry` first: %w", bin, err)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	host := fmt.Sprintf("127.0.0.1:%d", port)
	dir := filepath.Join(l.Dir, "distribution")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	// Keys of distribution v3's configuration package: notifications.endpoints[]
	// (url, headers, timeout, threshold, backoff, ignore.actions), as its docs show.
	cfg := fmt.Sprintf(`version: 0.1
log:
  level: info
storage:
  inmemory: {}
http:
  addr: %s
  secret: e2e-not-a-secret
notifications:
  endpoints:
    - name: image-resolver
      url: %s
      headers:
        Authorization: [Bearer %s]
      timeout: 2s
      threshold: 5
      backoff: 1s
      ignore:
        actions: [pull]
`, host, hookURL, secret)
	cfgPath := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	// REGISTRY_* variables would override the file: a minimal environment.
	p, err := l.start("distribution", []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir}, bin, "serve", cfgPath)
	if err != nil {
		return nil, err
	}
	if err := waitFor(30*time.Second, "distribution /v2/", p, httpOK("http://"+host+"/v2/")); err != nil {
		return nil, err
	}
	return &Distribution{Host: host, proc: p}, nil
}

// PushTag pushes repo:tag (linux/amd64 and linux/arm64) to the registry with
// go-containerregistry's remote.Write (`demo --seed-remote`), as a CI pipeline
// would.
func (l *Lab) PushTag(host, repo, tag string) error {
	f := filepath.Join(l.Dir, "tmp", fmt.Sprintf("push-%s-%d.yaml", tag, time.Now().UnixNano()))
	sc := fmt.Sprintf("repositories:\n  %s:\n    tags:\n      - {tag: %q, created: %q, platforms: [linux/amd64, linux/arm64]}\n",
		repo, tag, time.Now().UTC().Format(time.RFC3339))
	if err := os.WriteFile(f, []byte(sc), 0o644); err != nil {
		return err
	}
	_, err := l.must("", "demo", "--seed-remote", "http://"+host, "--scenario", f)
	return err
}

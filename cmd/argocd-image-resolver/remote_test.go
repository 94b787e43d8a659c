package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/argocd-image-resolver/argocd-image-resolver/pin/gittest"
)

// A Kustomize overlay whose base is a git repository on a host the operator
// allowed (--kustomize-remote-hosts) renders through the daemon and its render
// workers exactly as the same overlay over the vendored base; without the setting
// the base is refused and the git server sees no request.
func TestDaemonRendersAllowedRemoteBase(t *testing.T) {
	_, cfg := demoRegistry(t)
	vendored := "../../testdata/apps/kustomize-overlay"
	files := map[string]string{}
	for _, name := range []string{"deployment.yaml", "kustomization.yaml", "service.yaml"} {
		b, err := os.ReadFile(filepath.Join(vendored, "base", name))
		if err != nil {
			t.Fatal(err)
		}
		files["base/"+name] = string(b)
	}
	git := gittest.New(t)
	url := git.Init(t, "bases.git", files)

	repo := t.TempDir()
	overlay := filepath.Join(repo, "overlay")
	if err := os.MkdirAll(overlay, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"kustomization.yaml", ".argocd-image-resolver.yaml"} {
		b, err := os.ReadFile(filepath.Join(vendored, "overlay", name))
		if err != nil {
			t.Fatal(err)
		}
		s := strings.Replace(string(b), "- ../base", "- "+url+"//base?ref=main", 1)
		if err := os.WriteFile(filepath.Join(overlay, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	env := map[string]string{"ARGOCD_APP_NAME": "shop", "ARGOCD_APP_NAMESPACE": "shop"}
	want := generate(t, filepath.Join(vendored, "overlay"), map[string]string{"IMAGE_RESOLVER_REGISTRIES_CONFIG": cfg,
		"ARGOCD_APP_NAME": "shop", "ARGOCD_APP_NAMESPACE": "shop", "ARGOCD_APP_SOURCE_PATH": "testdata/apps/kustomize-overlay/overlay"})
	if want.code != 0 {
		t.Fatalf("vendored overlay: exit %d: %s", want.code, want.stderr)
	}
	env["ARGOCD_APP_SOURCE_PATH"] = "overlay"

	refusing, _ := startDaemon(t, cfg)
	env["IMAGE_RESOLVER_SOCKET"] = refusing
	refused := runIn(t, overlay, env, thinBinary)
	if refused.code == 0 || !strings.Contains(refused.stderr, "remote references are not fetched by the sidecar") ||
		!strings.Contains(refused.stderr, "kustomizeRemoteHosts") || len(git.Requests()) != 0 {
		t.Errorf("no host allowed: exit %d, stderr %q, %d git requests; want a refusal naming kustomizeRemoteHosts and no request",
			refused.code, refused.stderr, len(git.Requests()))
	}

	allowing, _ := startDaemon(t, cfg, "--kustomize-remote-hosts", git.URL)
	env["IMAGE_RESOLVER_SOCKET"] = allowing
	got := runIn(t, overlay, env, thinBinary)
	if got.code != 0 || strings.Contains(got.stderr, "unreachable") {
		t.Fatalf("allowed remote base: exit %d: %s", got.code, got.stderr)
	}
	if got.stdout != want.stdout {
		t.Errorf("remote base renders differently from the vendored one:\n--- remote\n%s\n--- vendored\n%s", got.stdout, want.stdout)
	}
	if n := len(git.Requests()); n != 2 {
		t.Errorf("%d requests to the git server, want 2", n)
	}
	// Argo CD logs a successful plugin's stderr: it says which commit the base was.
	fetched := "argocd-image-resolver: fetched: " + url + "//base?ref=main (git " + url + " at commit " + git.Head(t, "bases.git", "main") + ")"
	if !strings.Contains(got.stderr, fetched) {
		t.Errorf("stderr does not say what was fetched (%q):\n%s", fetched, got.stderr)
	}
}

// A render worker gets what a process needs and the proxy variables (remote
// Kustomize entries go through the daemon's proxy), never credentials or settings.
func TestWorkerEnviron(t *testing.T) {
	got := workerEnviron([]string{"PATH=/bin", "HOME=/home/x", "HTTPS_PROXY=http://proxy:3128", "no_proxy=.svc",
		"REDIS_PASSWORD=secret", "IMAGE_RESOLVER_KUSTOMIZE_REMOTE_HOSTS=github.com", "AWS_SECRET_ACCESS_KEY=k", "DOCKER_CONFIG=/d"})
	want := []string{"PATH=/bin", "HOME=/home/x", "HTTPS_PROXY=http://proxy:3128", "no_proxy=.svc"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("worker environment %q, want %q", got, want)
	}
}

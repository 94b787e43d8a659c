package render

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkKustomizeRemoteBase renders an overlay over a git base on a loopback git
// server (git http-backend) the sidecar's way, with the host allowed (in process:
// the refs, one depth-1 pack, the tree held in memory), next to what Argo CD would
// otherwise run: `kustomize build`, which clones the base with the git program
// (built by `make bench-tools` into .cache/bin). Both print the same objects; it
// reports each time per render and the ratio.
func BenchmarkKustomizeRemoteBase(b *testing.B) {
	tool, err := filepath.Abs("../.cache/bin/kustomize")
	if err != nil {
		b.Fatal(err)
	}
	if _, err := os.Stat(tool); err != nil {
		b.Fatalf("%s is missing: run `make bench-tools`", tool)
	}
	g := newGitBases(b)
	fx := newRemoteFixture(b, g.srv.URL)
	app := filepath.Join(fx.repo, "app")
	writeFiles(b, app, map[string]string{"kustomization.yaml": "namePrefix: shop-\nresources:\n- " + g.url + "//base?ref=v1\n"})
	opts := Options{RepoRoot: fx.repo, RemoteHosts: fx.hosts}
	var ours, theirs time.Duration
	for b.Loop() {
		start := time.Now()
		r, err := Render(context.Background(), app, opts)
		if err != nil {
			b.Fatal(err)
		}
		ours += time.Since(start)
		var got bytes.Buffer
		if err := Write(&got, r.Objects); err != nil {
			b.Fatal(err)
		}
		start = time.Now()
		cmd := exec.Command(tool, "build", ".")
		cmd.Dir = app
		cmd.Env = append(os.Environ(), "HOME="+b.TempDir(), "GIT_CONFIG_NOSYSTEM=1")
		out, err := cmd.Output()
		if err != nil {
			b.Fatalf("kustomize build: %v", err)
		}
		theirs += time.Since(start)
		if got.String() != string(out) {
			b.Fatalf("outputs differ:\n--- sidecar\n%s\n--- kustomize build\n%s", got.String(), out)
		}
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(b.N) }
	b.ReportMetric(ms(ours), "sidecar-ms/op")
	b.ReportMetric(ms(theirs), "kustomize-cli-ms/op")
	b.ReportMetric(float64(ours)/float64(theirs), "sidecar/cli")
}

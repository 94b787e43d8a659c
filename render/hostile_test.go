package render

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// secretMarker is the content of files outside the repository (and of files a
// render refuses): no render may print it, in its objects or in its errors.
const secretMarker = "HOSTILE-SECRET-MARKER"

// hostileCase is one hostile app: setup builds it (in t.TempDir, or points at
// testdata/hostile) and returns the app directory and the options; the render must
// fail, within watchdog, with an error that holds every has, none of secretMarker,
// and (hostile_kinds_test.go) matches kind.
type hostileCase struct {
	name  string
	setup func(t *testing.T, env *hostileEnv) (dir string, opts Options)
	has   []string
	kind  string
	// deadline is the render's context deadline (default 10s: the refusals answer in
	// milliseconds, the margin is for loaded CI machines).
	deadline time.Duration
}

// hostileEnv is what every case shares: a repository and a directory beside it, a
// loopback HTTP server that counts requests and a git program that records a run.
type hostileEnv struct {
	repo, outside string
	server        *httptest.Server
	hits          atomic.Int64
	gitRan        string // a file the fake git creates
}

// watchdog is how long past its deadline a render may take before the test calls it
// blocked.
const watchdog = 10 * time.Second

func newHostileEnv(t *testing.T) *hostileEnv {
	t.Helper()
	tmp := t.TempDir()
	env := &hostileEnv{repo: filepath.Join(tmp, "repo"), outside: filepath.Join(tmp, "outside")}
	writeFiles(t, env.outside, map[string]string{
		"secret.yaml":        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: outside\ndata:\n  secret: " + secretMarker + "\n",
		"kustomization.yaml": "resources:\n- secret.yaml\n",
		"values.yaml":        "secret: " + secretMarker + "\n",
		"bad-template.yaml":  "{{ " + strings.ReplaceAll(secretMarker, "-", "_") + " }}\n",
		"templates/cm.yaml":  "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: outside\ndata:\n  secret: " + secretMarker + "\n",
	})
	if err := os.MkdirAll(env.repo, 0o755); err != nil {
		t.Fatal(err)
	}
	env.server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		env.hits.Add(1)
		fmt.Fprint(w, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: remote\n")
	}))
	t.Cleanup(env.server.Close)
	bin := filepath.Join(tmp, "bin")
	env.gitRan = filepath.Join(tmp, "git-ran")
	writeFiles(t, bin, map[string]string{"git": "#!/bin/sh\necho ran >> " + env.gitRan + "\nexit 1\n"})
	if err := os.Chmod(filepath.Join(bin, "git"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	return env
}

func writeFiles(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	for name, data := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

func mkfifo(t *testing.T, p string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
}

const (
	chartYAML = "apiVersion: v2\nname: app\nversion: 0.1.0\n"
	cmYAML    = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\n"
)

// helmApp writes a chart in repo/app and returns its directory.
func helmApp(t *testing.T, env *hostileEnv, files map[string]string) string {
	app := filepath.Join(env.repo, "app")
	all := map[string]string{"Chart.yaml": chartYAML, "templates/cm.yaml": cmYAML}
	for k, v := range files {
		all[k] = v
	}
	writeFiles(t, app, all)
	return app
}

func kustomizeApp(t *testing.T, env *hostileEnv, kustomization string, files map[string]string) string {
	app := filepath.Join(env.repo, "app")
	all := map[string]string{"kustomization.yaml": kustomization, "cm.yaml": cmYAML}
	for k, v := range files {
		all[k] = v
	}
	writeFiles(t, app, all)
	return app
}

func hostileCases() []hostileCase {
	return []hostileCase{
		// Helm: files reached through symbolic links out of the repository.
		{name: "helm/template symlink out", kind: "outside", has: []string{"templates/cm.yaml", "symbolic link", "outside the repository"},
			setup: func(t *testing.T, env *hostileEnv) (string, Options) {
				app := helmApp(t, env, nil)
				os.Remove(filepath.Join(app, "templates/cm.yaml"))
				symlink(t, filepath.Join(env.outside, "templates/cm.yaml"), filepath.Join(app, "templates/cm.yaml"))
				return app, Options{RepoRoot: env.repo}
			}},
		{name: "helm/templates dir symlink out", kind: "outside", has: []string{"templates", "outside the repository"},
			setup: func(t *testing.T, env *hostileEnv) (string, Options) {
				app := filepath.Join(env.repo, "app")
				writeFiles(t, app, map[string]string{"Chart.yaml": chartYAML})
				symlink(t, filepath.Join(env.outside, "templates"), filepath.Join(app, "templates"))
				return app, Options{RepoRoot: env.repo}
			}},
		{name: "helm/values.yaml symlink out", kind: "outside", has: []string{"values.yaml", "outside the repository"},
			setup: func(t *testing.T, env *hostileEnv) (string, Options) {
				app := helmApp(t, env, nil)
				symlink(t, filepath.Join(env.outside, "values.yaml"), filepath.Join(app, "values.yaml"))
				return app, Options{RepoRoot: env.repo}
			}},
		{name: "helm/refused template never echoed", kind: "outside", has: []string{"bad.yaml", "outside the repository"},
			setup: func(t *testing.T, env *hostileEnv) (string, Options) {
				app := helmApp(t, env, nil)
				symlink(t, filepath.Join(env.outside, "bad-template.yaml"), filepath.Join(app, "templates/bad.yaml"))
				return app, Options{RepoRoot: env.repo}
			}},
		{name: "helm/values file is a FIFO", kind: "special", has: []string{"extra.yaml", "not a regular file", "named pipe"},
			setup: func(t *testing.T, env *hostileEnv) (string, Options) {
				app := helmApp(t, env, nil)
				mkfifo(t, filepath.Join(env.repo, "shared", "extra.yaml"))
				return app, Options{RepoRoot: env.repo, ValuesFiles: []string{"../shared/extra.yaml"}}
			}},
		{name: "helm/.helmignore is a FIFO", kind: "special", has: []string{".helmignore", "not a regular file"},
			setup: func(t *testing.T, env *hostileEnv) (string, Options) {
				app := helmApp(t, env, nil)
				mkfifo(t, filepath.Join(app, ".helmignore"))
				return app, Options{RepoRoot: env.repo}
			}},

		// Kustomize: directories and files out of the repository.
		{name: "kustomize/resource climbs past the root", kind: "outside", has: []string{"outside the repository"},
			setup: func(t *testing.T, env *hostileEnv) (string, Options) {
				root, _ := filepath.Abs("../testdata/hostile/kustomize-escape/repo")
				return filepath.Join(root, "app"), Options{RepoRoot: root}
			}},
		{name: "kustomize/symlinked base out", kind: "outside", has: []string{"base", "outside the repository"},
			setup: func(t *testing.T, env *hostileEnv) (string, Options) {
				app := kustomizeApp(t, env, "resources:\n- base\n", nil)
				symlink(t, env.outside, filepath.Join(app, "base"))
				return app, Options{RepoRoot: env.repo}
			}},
		{name: "kustomize/no RepoRoot, no git checkout: the app directory is the boundary", kind: "outside", has: []string{"outside the repository"},
			setup: func(t *testing.T, env *hostileEnv) (string, Options) {
				app := kustomizeApp(t, env, "resources:\n- ../../outside\n", nil)
				return app, Options{}
			}},
		// Kustomize: the network and programs.
		{name: "kustomize/git resource", kind: "remote", has: []string{"kustomization.yaml", "github.com/example/hostile//deploy?ref=v1", "remote"},
			setup: func(t *testing.T, env *hostileEnv) (string, Options) {
				return "../testdata/hostile/kustomize-git", Options{RepoRoot: moduleRoot}
			}},
		{name: "kustomize/scp-style git base", kind: "remote", has: []string{"kustomization.yaml", "git@example.com:org/hostile.git", "remote"},
			setup: func(t *testing.T, env *hostileEnv) (string, Options) {
				return "../testdata/hostile/kustomize-git-base", Options{RepoRoot: moduleRoot}
			}},
		{name: "kustomize/https resource", kind: "remote", has: []string{"app/kustomization.yaml", "resources", "remote"},
			setup: func(t *testing.T, env *hostileEnv) (string, Options) {
				app := kustomizeApp(t, env, "resources:\n- cm.yaml\n- "+env.server.URL+"/cm.yaml\n", nil)
				return app, Options{RepoRoot: env.repo}
			}},
		{name: "kustomize/https configMapGenerator file", kind: "remote", has: []string{"configMapGenerator.files", "remote"},
			setup: func(t *testing.T, env *hostileEnv) (string, Options) {
				app := kustomizeApp(t, env, "configMapGenerator:\n- name: x\n  files:\n  - key="+env.server.URL+"/f\n", nil)
				return app, Options{RepoRoot: env.repo}
			}},
		{name: "kustomize/https patch in a transformer config", kind: "remote", has: []string{"t.yaml", "PatchTransformer.path", "remote"},
			setup: func(t *testing.T, env *hostileEnv) (string, Options) {
				app := kustomizeApp(t, env, "resources:\n- cm.yaml\ntransformers:\n- t.yaml\n", map[string]string{
					"t.yaml": "apiVersion: builtin\nkind: PatchTransformer\nmetadata:\n  name: p\npath: " + env.server.URL + "/patch.yaml\ntarget:\n  kind: ConfigMap\n",
				})
				return app, Options{RepoRoot: env.repo}
			}},
		{name: "kustomize/resource is a FIFO", kind: "special", has: []string{"deployment.yaml", "not a regular file"},
			setup: func(t *testing.T, env *hostileEnv) (string, Options) {
				app := kustomizeApp(t, env, "resources:\n- deployment.yaml\n", nil)
				mkfifo(t, filepath.Join(app, "deployment.yaml"))
				return app, Options{RepoRoot: env.repo}
			}},

		// Plain YAML.
		{name: "directory/deployment.yaml is a FIFO", kind: "special", has: []string{"deployment.yaml", "not a regular file"},
			setup: func(t *testing.T, env *hostileEnv) (string, Options) {
				app := filepath.Join(env.repo, "app")
				writeFiles(t, app, map[string]string{"cm.yaml": cmYAML})
				mkfifo(t, filepath.Join(app, "deployment.yaml"))
				return app, Options{RepoRoot: env.repo}
			}},
		{name: "directory/symlink to a FIFO", kind: "special", has: []string{"values.yaml", "not a regular file"},
			setup: func(t *testing.T, env *hostileEnv) (string, Options) {
				app := filepath.Join(env.repo, "app")
				writeFiles(t, app, map[string]string{"cm.yaml": cmYAML})
				mkfifo(t, filepath.Join(app, "pipe"))
				symlink(t, filepath.Join(app, "pipe"), filepath.Join(app, "values.yaml"))
				return app, Options{RepoRoot: env.repo}
			}},

		// Last: the stopped template goes on in the background (Go cannot stop it)
		// until the test binary exits; it must not starve the cases above.
		{name: "helm/template loops past the deadline", kind: "deadline", has: []string{"deadline"}, deadline: 2 * time.Second,
			setup: func(t *testing.T, env *hostileEnv) (string, Options) {
				return "../testdata/hostile/helm-loop", Options{RepoRoot: moduleRoot}
			}},
	}
}

// TestRenderHostile: every hostile app fails fast with an error that names what was
// refused, never echoes a refused file, reaches no server and runs no git.
func TestRenderHostile(t *testing.T) {
	for _, tt := range hostileCases() {
		t.Run(tt.name, func(t *testing.T) {
			env := newHostileEnv(t)
			dir, opts := tt.setup(t, env)
			deadline := tt.deadline
			if deadline == 0 {
				deadline = 10 * time.Second
			}
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()

			var before runtime.MemStats
			runtime.ReadMemStats(&before)
			start := time.Now()
			type result struct {
				r   *Rendered
				err error
			}
			done := make(chan result, 1)
			go func() {
				r, err := Render(ctx, dir, opts)
				done <- result{r, err}
			}()
			var res result
			select {
			case res = <-done:
			case <-time.After(deadline + watchdog):
				t.Fatalf("Render blocked: no answer %s after its %s deadline", watchdog, deadline)
			}
			elapsed := time.Since(start)
			var after runtime.MemStats
			runtime.ReadMemStats(&after)
			t.Logf("user sees: %v", res.err)
			t.Logf("took %s, allocated %d KiB, heap in use after %d KiB", elapsed.Round(time.Millisecond),
				(after.TotalAlloc-before.TotalAlloc)>>10, after.HeapInuse>>10)

			if res.err == nil {
				t.Fatalf("rendered %d objects, want an error", len(res.r.Objects))
			}
			msg := res.err.Error()
			for _, h := range tt.has {
				if !strings.Contains(msg, h) {
					t.Errorf("error does not name %q", h)
				}
			}
			if strings.Contains(msg, secretMarker) || strings.Contains(msg, strings.ReplaceAll(secretMarker, "-", "_")) {
				t.Errorf("error echoes the content of a refused file")
			}
			if n := env.hits.Load(); n > 0 {
				t.Errorf("the render made %d HTTP requests", n)
			}
			if _, err := os.Stat(env.gitRan); err == nil {
				t.Errorf("the render ran git")
			}
			// Returning within the watchdog (above) is what a user relies on: the
			// looping cases would run for minutes. Times belong to the log, not to a
			// wall-clock assertion that a loaded machine breaks.
			if want, ok := hostileKinds[tt.kind]; ok && !errors.Is(res.err, want) {
				t.Errorf("errors.Is(err, %v) = false", want)
			}
		})
	}
}

// TestRenderInsideRepositoryAllowed: links and bases inside the repository are fine.
func TestRenderInsideRepositoryAllowed(t *testing.T) {
	env := newHostileEnv(t)
	shared := filepath.Join(env.repo, "shared")
	writeFiles(t, shared, map[string]string{"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: shared\n", "kustomization.yaml": "resources:\n- cm.yaml\n", "values.yaml": "x: 1\n"})

	helm := filepath.Join(env.repo, "helm")
	writeFiles(t, helm, map[string]string{"Chart.yaml": chartYAML, "templates/cm.yaml": cmYAML})
	symlink(t, filepath.Join(shared, "values.yaml"), filepath.Join(helm, "values.yaml"))
	symlink(t, filepath.Join(shared, "cm.yaml"), filepath.Join(helm, "templates/shared.yaml"))

	kust := filepath.Join(env.repo, "overlays", "prod")
	writeFiles(t, kust, map[string]string{"kustomization.yaml": "resources:\n- ../../shared\n- linked\n"})
	writeFiles(t, filepath.Join(env.repo, "base2"), map[string]string{"kustomization.yaml": "resources:\n- cm.yaml\n", "cm.yaml": cmYAML})
	symlink(t, filepath.Join(env.repo, "base2"), filepath.Join(kust, "linked"))

	for _, dir := range []string{helm, kust} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		r, err := Render(ctx, dir, Options{RepoRoot: env.repo})
		cancel()
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		if got := ids(r.Objects); len(got) != 2 {
			t.Errorf("%s: objects %v, want 2", dir, got)
		}
	}
	// Without a repository root (a local run), an overlay reaches its bases inside
	// the git checkout around it.
	if err := os.Mkdir(filepath.Join(env.repo, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	if r, err := Render(context.Background(), kust, Options{}); err != nil {
		t.Fatalf("no RepoRoot, in a git checkout: %v", err)
	} else if got := ids(r.Objects); len(got) != 2 {
		t.Errorf("no RepoRoot: objects %v, want 2", got)
	}
	if env.hits.Load() != 0 {
		t.Error("HTTP requests made")
	}
}

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/argocd-image-resolver/argocd-image-resolver/render"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

// binary is the argocd-image-resolver built once for these tests: generate runs as a
// process, as Argo CD's CMP server runs it. thinBinary is plugin.yaml's generate
// command, argocd-image-resolver-generate, built next to it.
var binary, thinBinary string

func TestMain(m *testing.M) {
	// A daemon run in this process (the sidecar's tests) starts its render workers
	// as this program's render-worker command: this test binary, then.
	if len(os.Args) > 1 && os.Args[1] == "render-worker" {
		if err := render.ServeWorker(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	dir, err := os.MkdirTemp("", "air-bin")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "argocd-image-resolver")
	thinBinary = filepath.Join(dir, "argocd-image-resolver-generate")
	for out, pkg := range map[string]string{binary: ".", thinBinary: "../argocd-image-resolver-generate"} {
		// Stamped as make build stamps it (TestVersion reads it back).
		if log, err := exec.Command("go", "build", "-ldflags", "-X main.version="+testVersion+" -X main.commit="+testCommit, "-o", out, pkg).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build %s: %v\n%s", pkg, err, log)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// demoRegistry starts a registry seeded with the demo scenario and returns it and a
// registries config mapping registry.demo.local to it.
func demoRegistry(t testing.TB) (*rt.Server, string) {
	t.Helper()
	s := rt.New(t, rt.WithPageSize(2))
	sc, err := rt.LoadScenario("../../testdata/registry/demo.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SeedScenario(sc); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(t.TempDir(), "registries.yaml")
	body := fmt.Sprintf("registries:\n- prefix: registry.demo.local\n  api: %q\n  insecure: true\n", s.Host)
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return s, cfg
}

type run struct {
	stdout, stderr string
	code           int
}

// generate runs `argocd-image-resolver generate` in dir with Argo CD's environment and
// no daemon.
func generate(t *testing.T, dir string, env map[string]string) run {
	t.Helper()
	e := map[string]string{"IMAGE_RESOLVER_SOCKET": filepath.Join(t.TempDir(), "none.sock")}
	for k, v := range env {
		e[k] = v
	}
	return generateEnv(t, dir, e)
}

// generateEnv runs generate with exactly env (plus PATH, HOME and an empty DOCKER_CONFIG).
func generateEnv(t *testing.T, dir string, env map[string]string) run {
	t.Helper()
	return runIn(t, dir, env, binary, "generate")
}

// delegateEnv runs plugin.yaml's generate command (thinBinary) in dir with exactly
// env: the render goes to the daemon on IMAGE_RESOLVER_SOCKET, or, without one, to
// generate in-process.
func delegateEnv(t *testing.T, dir string, env map[string]string) run {
	t.Helper()
	return runIn(t, dir, env, thinBinary)
}

// runIn runs a command in dir with exactly env (plus PATH, HOME, an empty DOCKER_CONFIG).
func runIn(t testing.TB, dir string, env map[string]string, name string, args ...string) run {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "DOCKER_CONFIG=" + t.TempDir()}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return run{stdout.String(), stderr.String(), code}
}

func params(kv ...string) string {
	var ps []map[string]string
	for i := 0; i < len(kv); i += 2 {
		ps = append(ps, map[string]string{"name": kv[i], "string": kv[i+1]})
	}
	b, _ := json.Marshal(ps)
	return string(b)
}

// images returns "Kind/name container=image" for every container of the output.
func images(t *testing.T, out string) []string {
	t.Helper()
	var got []string
	for _, doc := range strings.Split(out, "\n---\n") {
		var obj struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
			Spec struct {
				Template    *podTemplate `json:"template"`
				JobTemplate *struct {
					Spec struct {
						Template *podTemplate `json:"template"`
					} `json:"spec"`
				} `json:"jobTemplate"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatalf("output is not YAML: %v\n%s", err, doc)
		}
		pt := obj.Spec.Template
		if obj.Spec.JobTemplate != nil {
			pt = obj.Spec.JobTemplate.Spec.Template
		}
		if pt == nil {
			continue
		}
		for _, c := range append(pt.Spec.InitContainers, pt.Spec.Containers...) {
			got = append(got, fmt.Sprintf("%s/%s %s=%s", obj.Kind, obj.Metadata.Name, c.Name, c.Image))
		}
	}
	slices.Sort(got)
	return got
}

type podTemplate struct {
	Spec struct {
		InitContainers []container `json:"initContainers"`
		Containers     []container `json:"containers"`
	} `json:"spec"`
}

type container struct {
	Name  string `json:"name"`
	Image string `json:"image"`
}

func TestGenerateSampleApps(t *testing.T) {
	_, cfg := demoRegistry(t)
	const web, api, batch = "registry.demo.local/demo/web", "registry.demo.local/demo/api", "registry.demo.local/demo/batch"
	tests := []struct {
		name, dir string
		env       map[string]string
		want      []string
		stderr    string
	}{
		{"helm chart, newest semver (arm64-only 1.2.0: no platform required)", "helm-web",
			map[string]string{"ARGOCD_APP_NAME": "shop"},
			[]string{"Deployment/shop-web web=" + web + ":1.2.0"}, ""},
		{"helm chart, platforms parameter skips the arm64-only tag", "helm-web",
			map[string]string{"ARGOCD_APP_NAME": "shop", "ARGOCD_APP_PARAMETERS": params("web.platforms", "linux/amd64")},
			[]string{"Deployment/shop-web web=" + web + ":1.1.0"}, ""},
		{"helm chart, operator default platform", "helm-web",
			map[string]string{"ARGOCD_APP_NAME": "shop", "IMAGE_RESOLVER_DEFAULT_PLATFORMS": "linux/amd64"},
			[]string{"Deployment/shop-web web=" + web + ":1.1.0"}, ""},
		{"kustomize overlay with an images transformer", "kustomize-overlay/overlay",
			map[string]string{"ARGOCD_APP_NAME": "api"},
			[]string{"Deployment/api api=" + api + ":1.4.2"}, ""},
		{"plain YAML: CronJob, initContainer", "plain-cron",
			map[string]string{"ARGOCD_APP_NAME": "cron"},
			[]string{"CronJob/nightly-report report=" + batch + ":12", "Deployment/web migrate=" + web + ":1.2.0", "Deployment/web web=" + web + ":1.2.0"}, ""},
		{"workload pinned to arm64 by nodeSelector", "arm64-pinned",
			map[string]string{"ARGOCD_APP_NAME": "arm", "IMAGE_RESOLVER_DEFAULT_PLATFORMS": "linux/amd64"},
			[]string{"Deployment/web-arm web=" + web + ":1.2.0"}, ""},
		{"image-list parameter overrides the file, pin-digest", "helm-web",
			map[string]string{"ARGOCD_APP_NAME": "shop", "ARGOCD_APP_PARAMETERS": params("image-list", "web="+web+":~1.0", "web.pin-digest", "true")},
			[]string{"Deployment/shop-web web=" + web + ":1.0.0@sha256:"}, ""},
		{"streamed revision of argocd app diff --local", "plain-cron",
			map[string]string{"ARGOCD_APP_NAME": "cron", "ARGOCD_APP_REVISION": "streamed"},
			[]string{"CronJob/nightly-report report=" + batch + ":12", "Deployment/web migrate=" + web + ":1.2.0", "Deployment/web web=" + web + ":1.2.0"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := map[string]string{"IMAGE_RESOLVER_REGISTRIES_CONFIG": cfg, "ARGOCD_APP_NAMESPACE": "shop"}
			for k, v := range tt.env {
				env[k] = v
			}
			r := generate(t, filepath.Join("../../testdata/apps", tt.dir), env)
			if r.code != 0 {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			got := images(t, r.stdout)
			if len(got) != len(tt.want) {
				t.Fatalf("images = %v, want %v", got, tt.want)
			}
			for i := range got {
				if !strings.HasPrefix(got[i], tt.want[i]) {
					t.Errorf("image %d = %s, want %s", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func TestGenerateAnnotatesSkippedTag(t *testing.T) {
	_, cfg := demoRegistry(t)
	r := generate(t, "../../testdata/apps/helm-web", map[string]string{
		"IMAGE_RESOLVER_REGISTRIES_CONFIG": cfg, "ARGOCD_APP_NAME": "shop",
		"ARGOCD_APP_PARAMETERS": params("web.platforms", "linux/amd64")})
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for _, want := range []string{
		"argocd-image-resolver/resolved: 'web=registry.demo.local/demo/web:1.1.0 (semver ^1.0; platforms linux/amd64)'",
		"argocd-image-resolver/skipped: 'web=registry.demo.local/demo/web:1.2.0: no manifest for linux/amd64 (has linux/arm64)'",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r.stdout)
		}
	}
}

func TestGenerateIsDeterministic(t *testing.T) {
	_, cfg := demoRegistry(t)
	for _, app := range []string{"helm-web", "kustomize-overlay/overlay", "plain-cron", "arm64-pinned"} {
		env := map[string]string{"IMAGE_RESOLVER_REGISTRIES_CONFIG": cfg, "ARGOCD_APP_NAME": "a", "ARGOCD_APP_NAMESPACE": "ns"}
		first := generate(t, filepath.Join("../../testdata/apps", app), env)
		second := generate(t, filepath.Join("../../testdata/apps", app), env)
		if first.code != 0 || first.stdout != second.stdout {
			t.Errorf("%s: two renders differ (exit %d):\n%s\n---- vs ----\n%s", app, first.code, first.stdout, second.stdout)
		}
	}
}

func TestGenerateBadInput(t *testing.T) {
	s, cfg := demoRegistry(t)
	_ = s
	deployment := "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  template:\n    spec:\n      containers:\n      - name: web\n        image: %s\n"
	policy := "images:\n  web:\n    image: registry.demo.local/demo/web\n"
	tests := []struct {
		name  string
		files map[string]string
		env   map[string]string
		want  []string
	}{
		{"malformed ARGOCD_APP_PARAMETERS",
			map[string]string{"d.yaml": fmt.Sprintf(deployment, "registry.demo.local/demo/web:1.0.0"), ".argocd-image-resolver.yaml": policy},
			map[string]string{"ARGOCD_APP_PARAMETERS": `[{"name":"web.platforms","string":`},
			[]string{"ARGOCD_APP_PARAMETERS"}},
		{"parameter for an alias that has no image",
			map[string]string{"d.yaml": fmt.Sprintf(deployment, "registry.demo.local/demo/web:1.0.0"), ".argocd-image-resolver.yaml": policy},
			map[string]string{"ARGOCD_APP_PARAMETERS": params("wbe.update-strategy", "semver")},
			[]string{"wbe.update-strategy"}},
		{"unknown strategy",
			map[string]string{"d.yaml": fmt.Sprintf(deployment, "registry.demo.local/demo/web:1.0.0"), ".argocd-image-resolver.yaml": policy},
			map[string]string{"ARGOCD_APP_PARAMETERS": params("web.update-strategy", "fastest")},
			[]string{`web.update-strategy`, `"fastest"`, "newest-build"}},
		{"policy file with an unknown key",
			map[string]string{"d.yaml": fmt.Sprintf(deployment, "registry.demo.local/demo/web:1.0.0"), ".argocd-image-resolver.yaml": policy + "    strategey: semver\n"},
			nil, []string{".argocd-image-resolver.yaml", "strategey"}},
		{"YAML that does not parse", // with apiVersion, kind and metadata: Argo CD skips a file without them
			map[string]string{"d.yaml": "apiVersion: apps/v1\nkind: Deployment\nmetadata: [\n", ".argocd-image-resolver.yaml": policy},
			nil, []string{"d.yaml"}},
		{"image field that is not a string",
			map[string]string{"d.yaml": fmt.Sprintf(deployment, "{repo: x}"), ".argocd-image-resolver.yaml": policy},
			nil, []string{"Deployment", "image"}},
		{"chart that does not render",
			map[string]string{"Chart.yaml": "apiVersion: v2\nname: broken\nversion: 0.1.0\n", "templates/x.yaml": "{{ .Values.missing.field }}\n"},
			nil, []string{"missing"}},
		{"no tag qualifies",
			map[string]string{"d.yaml": fmt.Sprintf(deployment, "registry.demo.local/demo/web:1.0.0"), ".argocd-image-resolver.yaml": policy},
			map[string]string{"ARGOCD_APP_PARAMETERS": params("web.platforms", "linux/s390x")},
			[]string{"no tag qualifies", "linux/s390x", "1.2.0"}},
		{"unknown pin-target",
			map[string]string{"d.yaml": fmt.Sprintf(deployment, "registry.demo.local/demo/web:1.0.0"), ".argocd-image-resolver.yaml": policy},
			map[string]string{"ARGOCD_APP_PARAMETERS": params("pin-mode", "use", "pin-target", "values")},
			[]string{`parameter "pin-target"`, `"values"`, "helmvalues:<path>"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, body := range tt.files {
				p := filepath.Join(dir, name)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			env := map[string]string{"IMAGE_RESOLVER_REGISTRIES_CONFIG": cfg, "ARGOCD_APP_NAME": "app"}
			for k, v := range tt.env {
				env[k] = v
			}
			r := generate(t, dir, env)
			if r.code != 1 {
				t.Errorf("exit status = %d, want 1; stderr: %s", r.code, r.stderr)
			}
			if r.stdout != "" {
				t.Errorf("stdout not empty on failure:\n%s", r.stdout)
			}
			lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
			last := lines[len(lines)-1]
			for _, w := range tt.want {
				if !strings.Contains(last, w) {
					t.Errorf("error line %q lacks %q", last, w)
				}
			}
			if strings.Contains(r.stderr, "panic") || strings.Contains(r.stderr, "goroutine ") {
				t.Errorf("panicked: %s", r.stderr)
			}
		})
	}
}

func TestGenerateRegistryDown(t *testing.T) {
	s, cfg := demoRegistry(t)
	s.Close()
	r := generate(t, "../../testdata/apps/helm-web", map[string]string{"IMAGE_RESOLVER_REGISTRIES_CONFIG": cfg, "ARGOCD_APP_NAME": "shop"})
	if r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, "list tags of") || !strings.Contains(r.stderr, "connection refused") {
		t.Errorf("exit %d, stdout %q, stderr %q; want exit 1 naming the failed tag list", r.code, r.stdout, r.stderr)
	}
}

// Image fields of custom resources, declared by the operator on the sidecar.
func TestGenerateExtraImagePaths(t *testing.T) {
	_, cfg := demoRegistry(t)
	dir := t.TempDir()
	files := map[string]string{
		"wf.yaml":                     "apiVersion: argoproj.io/v1alpha1\nkind: Workflow\nmetadata:\n  name: nightly\nspec:\n  templates:\n  - name: a\n    container:\n      image: registry.demo.local/demo/web:1.0.0\n",
		".argocd-image-resolver.yaml": "images:\n  web:\n    image: registry.demo.local/demo/web\n    platforms: [linux/amd64]\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	env := map[string]string{"IMAGE_RESOLVER_REGISTRIES_CONFIG": cfg, "ARGOCD_APP_NAME": "wf"}
	if r := generate(t, dir, env); r.code != 0 || !strings.Contains(r.stdout, "image: registry.demo.local/demo/web:1.0.0") {
		t.Errorf("without the extra path the Workflow must be left alone: exit %d, %s %s", r.code, r.stdout, r.stderr)
	}
	env["IMAGE_RESOLVER_EXTRA_IMAGE_PATHS"] = "Workflow.argoproj.io:spec.templates[].container.image"
	if r := generate(t, dir, env); r.code != 0 || !strings.Contains(r.stdout, "image: registry.demo.local/demo/web:1.1.0") {
		t.Errorf("with the extra path: exit %d, %s %s", r.code, r.stdout, r.stderr)
	}
	env["IMAGE_RESOLVER_EXTRA_IMAGE_PATHS"] = "Workflow:"
	if r := generate(t, dir, env); r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, `IMAGE_RESOLVER_EXTRA_IMAGE_PATHS: invalid value "Workflow:"`) {
		t.Errorf("bad extra path: exit %d, stderr %q", r.code, r.stderr)
	}
}

package argocde2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// RefreshAnnotation is Argo CD's annotation that asks for a render bypassing its
// manifest cache.
const RefreshAnnotation = "argocd.argoproj.io/refresh"

// MetricValue returns the value of one sample of the resolver's /metrics, named
// with its labels as exposed (e.g. `argocd_image_resolver_refreshes_total{outcome="requested"}`);
// 0 when the sample is absent (a counter never incremented).
func (l *Lab) MetricValue(sample string) (float64, error) {
	lines, err := l.Metrics(sample)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(lines, "\n") {
		if v, ok := strings.CutPrefix(line, sample+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, nil
}

// KubeApp is an Application created straight through the API (no argocd-server),
// rendered by hand the way repo-server's CMP server runs the plugin.
type KubeApp struct {
	Namespace, Name string
	Images          map[string]string // alias -> repository:constraint (image-list)
	Params          [][2]string       // more plugin parameters
}

// ArgoName is the app's name as Argo CD passes it to a plugin.
func (a KubeApp) ArgoName() string {
	if a.Namespace == "argocd" {
		return a.Name
	}
	return a.Namespace + "_" + a.Name
}

func (a KubeApp) params() [][2]string {
	var list []string
	for alias, ref := range a.Images {
		list = append(list, alias+"="+ref)
	}
	return append([][2]string{{"image-list", strings.Join(list, ",")}}, a.Params...)
}

// CreateKubeApp creates the Application with kubectl (its namespace too).
func (l *Lab) CreateKubeApp(a KubeApp) error {
	if a.Namespace != "argocd" {
		if _, err := l.must("", "kubectl", "create", "namespace", a.Namespace); err != nil && !strings.Contains(err.Error(), "AlreadyExists") {
			return err
		}
	}
	var ps []map[string]any
	for _, p := range a.params() {
		ps = append(ps, map[string]any{"name": p[0], "string": p[1]})
	}
	app := map[string]any{
		"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
		"metadata": map[string]any{"name": a.Name, "namespace": a.Namespace},
		"spec": map[string]any{
			"project":     "default",
			"destination": map[string]any{"server": "https://kubernetes.default.svc", "namespace": "default"},
			"source":      map[string]any{"repoURL": "https://git.example/apps.git", "targetRevision": "main", "path": a.Name, "plugin": map[string]any{"name": PluginName, "parameters": ps}},
		},
	}
	b, err := json.Marshal(app)
	if err != nil {
		return err
	}
	_, err = l.must(string(b), "kubectl", "apply", "-f", "-")
	return err
}

// RenderKubeApp renders an app of one Deployment running images as the CMP server would run the
// plugin for it: argocd-image-resolver-generate in the app's directory with Argo
// CD's environment, against the sidecar's daemon. It returns the manifests.
func (l *Lab) RenderKubeApp(a KubeApp, images ...string) (string, error) {
	dir := filepath.Join(l.Dir, "tmp", "render-"+a.ArgoName())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	manifest := "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: app}\nspec:\n  template:\n    spec:\n      containers:\n"
	for i, image := range images {
		manifest += fmt.Sprintf("        - {name: c%d, image: %s}\n", i, image)
	}
	if err := os.WriteFile(filepath.Join(dir, "deployment.yaml"), []byte(manifest), 0o644); err != nil {
		return "", err
	}
	var ps []map[string]any
	for _, p := range a.params() {
		ps = append(ps, map[string]any{"name": p[0], "string": p[1]})
	}
	params, _ := json.Marshal(ps)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(l.Paths.Bin, "argocd-image-resolver-generate"))
	cmd.Dir = dir
	cmd.Env = l.baseEnv("IMAGE_RESOLVER_SOCKET="+l.DaemonSocket(), "IMAGE_RESOLVER_REGISTRIES_CONFIG="+l.registriesConfig(),
		"IMAGE_RESOLVER_DEFAULT_PLATFORMS=linux/amd64",
		"ARGOCD_APP_NAME="+a.ArgoName(), "ARGOCD_APP_NAMESPACE=default", "ARGOCD_APP_REVISION=0123456789abcdef0123456789abcdef01234567",
		"ARGOCD_APP_SOURCE_REPO_URL=https://git.example/apps.git", "ARGOCD_APP_SOURCE_PATH="+a.Name, "ARGOCD_APP_SOURCE_TARGET_REVISION=main",
		"ARGOCD_APP_PARAMETERS="+string(params))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("render %s: %v: %s", a.ArgoName(), err, errb.String())
	}
	return out.String(), nil
}

package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/argoproj/argo-cd/v2/common"
	"github.com/argoproj/argo-cd/v2/pkg/apis/application/v1alpha1"
	"github.com/argoproj/argo-cd/v2/reposerver/apiclient"
	"github.com/argoproj/argo-cd/v2/reposerver/repository"
	argopath "github.com/argoproj/argo-cd/v2/util/app/path"
	"github.com/argoproj/argo-cd/v2/util/git"
	"github.com/argoproj/argo-cd/v2/util/io/files"
	"github.com/argoproj/argo-cd/v2/util/tgzstream"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// StreamedRevision is the revision repo-server renders `argocd app diff --local
// --server-side-generate` with (Service.GenerateManifestWithFiles).
const StreamedRevision = "streamed"

// DefaultRenderTimeout is repo-server's default request deadline (the controller's
// --repo-server-timeout-seconds, 60).
const DefaultRenderTimeout = 60 * time.Second

// DefaultKubeVersion and DefaultAPIVersions stand in for what the application
// controller reads from the destination cluster.
var (
	// The controller sends "<major>.<minor>" (gitops-engine's GetServerVersion).
	DefaultKubeVersion = "1.31"
	DefaultAPIVersions = []string{
		"v1", "v1/ConfigMap", "v1/Pod", "v1/Secret", "v1/Service", "v1/ServiceAccount",
		"apps/v1", "apps/v1/DaemonSet", "apps/v1/Deployment", "apps/v1/ReplicaSet", "apps/v1/StatefulSet",
		"batch/v1", "batch/v1/CronJob", "batch/v1/Job",
		"networking.k8s.io/v1", "networking.k8s.io/v1/Ingress",
	}
)

// App is an Application whose single source names a config management plugin.
type App struct {
	Name      string // metadata.name, sent as ARGOCD_APP_NAME
	Namespace string // spec.destination.namespace, sent as ARGOCD_APP_NAMESPACE
	Path      string // spec.source.path, relative to the repository root
	// TargetRevision is spec.source.targetRevision (default "HEAD").
	TargetRevision string
	// RepoURL is spec.source.repoURL (default: a file:// URL of the repository).
	RepoURL string
	// Plugin is spec.source.plugin.name (default "image-resolver-v1").
	Plugin     string
	Env        v1alpha1.Env
	Parameters v1alpha1.ApplicationSourcePluginParameters
	// KubeVersion and APIVersions default to DefaultKubeVersion and DefaultAPIVersions.
	KubeVersion string
	APIVersions []string
	// Timeout is the request deadline (default DefaultRenderTimeout).
	Timeout time.Duration
}

func (a App) withDefaults(repoURL string) App {
	if a.Name == "" {
		a.Name = "e2e"
	}
	if a.Namespace == "" {
		a.Namespace = "default"
	}
	if a.Path == "" {
		a.Path = "."
	}
	if a.TargetRevision == "" {
		a.TargetRevision = "HEAD"
	}
	if a.RepoURL == "" {
		a.RepoURL = repoURL
	}
	if a.Plugin == "" {
		a.Plugin = "image-resolver-v1"
	}
	if a.KubeVersion == "" {
		a.KubeVersion = DefaultKubeVersion
	}
	if a.APIVersions == nil {
		a.APIVersions = DefaultAPIVersions
	}
	if a.Timeout == 0 {
		a.Timeout = DefaultRenderTimeout
	}
	return a
}

// Request is the ManifestRequest the application controller sends to repo-server for
// this App (single source, plugin named explicitly).
func (a App) Request() *apiclient.ManifestRequest {
	source := &v1alpha1.ApplicationSource{
		RepoURL:        a.RepoURL,
		Path:           a.Path,
		TargetRevision: a.TargetRevision,
		Plugin: &v1alpha1.ApplicationSourcePlugin{
			Name:       a.Plugin,
			Env:        a.Env,
			Parameters: a.Parameters,
		},
	}
	return &apiclient.ManifestRequest{
		Repo:              &v1alpha1.Repository{Repo: a.RepoURL},
		Revision:          a.TargetRevision,
		AppLabelKey:       common.LabelKeyAppInstance,
		AppName:           a.Name,
		Namespace:         a.Namespace,
		ApplicationSource: source,
		KubeVersion:       a.KubeVersion,
		ApiVersions:       a.APIVersions,
		ProjectName:       "default",
	}
}

// Render renders app from the repository's HEAD commit exactly as argocd-repo-server
// does once it has checked the commit out: repository.GenerateManifests with the
// commit SHA as revision, which builds the plugin's env (ARGOCD_APP_*, KUBE_*,
// ARGOCD_ENV_*, ARGOCD_APP_PARAMETERS, PARAM_*), streams the repository as tar.gz to
// the cmp-server over its socket and parses what the plugin printed. It returns the
// manifests as JSON strings, or the error Argo CD would put in the app's
// ComparisonError.
func Render(repo *GitRepo, app App) ([]string, error) {
	app = app.withDefaults(repo.URL())
	appPath, err := argopath.Path(repo.Root, app.Path)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), app.Timeout)
	defer cancel()
	res, err := repository.GenerateManifests(ctx, appPath, repo.Root, repo.SHA, app.Request(), false, &git.NoopCredsStore{}, resource.MustParse("0"), nil)
	if err != nil {
		return nil, err
	}
	return res.Manifests, nil
}

// DefaultLocalIncludes is the default of `argocd app diff --local-include`: with
// --server-side-generate the CLI sends only files whose name matches one of these.
var DefaultLocalIncludes = []string{"*.yaml", "*.yml", "*.json"}

// RenderStreamed renders app from a local directory the way `argocd app diff APP
// --local DIR --server-side-generate [--local-include PATTERN...]` does: the CLI tars
// the files of DIR whose name matches includes (DefaultLocalIncludes when none are
// given; tgzstream.CompressFiles), argocd-server forwards the tarball with the
// Application's ManifestRequest, and repo-server's GenerateManifestWithFiles extracts
// it into a fresh temp dir (files.Untgz), takes spec.source.path under it as the app
// path and calls GenerateManifests with the revision "streamed" (so
// ARGOCD_APP_REVISION is "streamed", _SHORT "streame", _SHORT_8 "streamed"). DIR is
// therefore the repository root.
func RenderStreamed(localDir string, app App, includes ...string) ([]string, error) {
	app = app.withDefaults("file://" + filepath.ToSlash(localDir))
	if len(includes) == 0 {
		includes = DefaultLocalIncludes
	}

	tgz, filesWritten, _, err := tgzstream.CompressFiles(localDir, includes, nil)
	if err != nil {
		return nil, fmt.Errorf("failed to compress files: %w", err)
	}
	defer tgzstream.CloseAndDelete(tgz)
	if filesWritten == 0 {
		return nil, fmt.Errorf("no files to send")
	}

	workDir, err := files.CreateTempDir("")
	if err != nil {
		return nil, fmt.Errorf("error creating temp dir: %w", err)
	}
	defer os.RemoveAll(workDir)
	// repo-server's --streamed-manifest-max-extracted-size default is 1G.
	maxExtracted := resource.MustParse("1G")
	if err := files.Untgz(workDir, tgz, maxExtracted.ToDec().Value(), false); err != nil {
		return nil, fmt.Errorf("error decompressing tgz file: %w", err)
	}
	appPath, err := argopath.Path(workDir, app.Path)
	if err != nil {
		return nil, fmt.Errorf("failed to get app path: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), app.Timeout)
	defer cancel()
	res, err := repository.GenerateManifests(ctx, appPath, workDir, StreamedRevision, app.Request(), false, &git.NoopCredsStore{}, resource.MustParse("0"), nil)
	if err != nil {
		return nil, err
	}
	return res.Manifests, nil
}

// MustRender is Render that fails the test on error.
func MustRender(t testing.TB, repo *GitRepo, app App) []*unstructured.Unstructured {
	t.Helper()
	manifests, err := Render(repo, app)
	if err != nil {
		t.Fatalf("rendering %s (%s) through Argo CD: %v", app.Name, app.Path, err)
	}
	return Decode(t, manifests)
}

// Decode parses GenerateManifests' JSON strings.
func Decode(t testing.TB, manifests []string) []*unstructured.Unstructured {
	t.Helper()
	out := make([]*unstructured.Unstructured, 0, len(manifests))
	for i, m := range manifests {
		obj := &unstructured.Unstructured{}
		if err := json.Unmarshal([]byte(m), &obj.Object); err != nil {
			t.Fatalf("manifest %d is not JSON: %v\n%s", i, err, m)
		}
		out = append(out, obj)
	}
	return out
}

// StringParam, ArrayParam and MapParam build spec.source.plugin.parameters entries.
func StringParam(name, value string) v1alpha1.ApplicationSourcePluginParameter {
	return v1alpha1.ApplicationSourcePluginParameter{Name: name, String_: &value}
}

func ArrayParam(name string, values ...string) v1alpha1.ApplicationSourcePluginParameter {
	return v1alpha1.ApplicationSourcePluginParameter{Name: name, OptionalArray: &v1alpha1.OptionalArray{Array: values}}
}

func MapParam(name string, values map[string]string) v1alpha1.ApplicationSourcePluginParameter {
	return v1alpha1.ApplicationSourcePluginParameter{Name: name, OptionalMap: &v1alpha1.OptionalMap{Map: values}}
}

// EnvVar builds a spec.source.plugin.env entry (the plugin sees ARGOCD_ENV_<name>).
func EnvVar(name, value string) *v1alpha1.EnvEntry {
	return &v1alpha1.EnvEntry{Name: name, Value: value}
}

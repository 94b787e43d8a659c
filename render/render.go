// Package render turns an Argo CD application source (a Helm chart, a Kustomize
// overlay or a directory of plain manifests) into Kubernetes objects, finds the image
// fields of those objects and the platforms their workloads run on, rewrites images in
// place and prints the objects as a deterministic YAML stream.
//
// Objects are kyaml nodes (sigs.k8s.io/kustomize/kyaml/yaml), so a rewrite changes one
// scalar and leaves every other field, comment and key order as rendered.
//
// Every read stays inside the repository checkout (confine.go: a guarded file
// system under Helm's and Kustomize's own loaders, bounded in size, never a named
// pipe or device). Kustomize remote resources and bases are refused unless the
// operator lists their host (kustomizeRemoteHosts); then the render fetches them
// itself, over HTTP(S) or git's smart-HTTP protocol, bounded in entries, bytes and
// time, and serves them to Kustomize from memory (remote*.go, kustomize_remote.go).
// A render can run in a worker process (Workers, ServeWorker) so that one past its
// deadline or memory bound, or whose caller left, is stopped for real.
package render

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"
)

// SourceKind is the kind of application source Render detected.
type SourceKind string

// The source kinds, spelled as Argo CD spells them in lower case.
const (
	SourceHelm      SourceKind = "helm"
	SourceKustomize SourceKind = "kustomize"
	SourceDirectory SourceKind = "directory"
)

// Options carry what Argo CD passes to a render.
type Options struct {
	// AppName is the Helm release name (ARGOCD_APP_NAME). Argo CD spells applications
	// outside its control-plane namespace "namespace_name"; the namespace part is
	// dropped because a release name cannot hold "_". Empty: the directory's name.
	AppName string
	// Namespace is the destination namespace (ARGOCD_APP_NAMESPACE); Helm's
	// .Release.Namespace. Empty: "default", as `helm template` does.
	Namespace string
	// KubeVersion (KUBE_VERSION) and APIVersions (KUBE_API_VERSIONS) are Helm's
	// .Capabilities, as Argo CD passes --kube-version and --api-versions.
	KubeVersion string
	APIVersions []string
	// ValuesFiles are Helm values files relative to the chart directory, applied in
	// order (like --values). They must stay inside RepoRoot.
	ValuesFiles []string
	// HelmParameters are applied like --set name=value (sorted by name, commas in
	// values escaped as Argo CD does); they win over ValuesFiles and Values.
	HelmParameters map[string]string
	// Values is inline YAML, applied after ValuesFiles (Argo CD's `values`).
	Values string
	// RepoRoot is the root of the extracted repository around the app directory: no
	// render reads outside it, whatever the source type and however a path gets
	// there ("../", a symbolic link). Values files may reach it with "../" but
	// nothing beyond it. Empty: the app directory itself is the boundary (for
	// Kustomize, empty or the app directory: the git checkout around it, see
	// renderKustomize).
	RepoRoot string
	// RemoteHosts are the hosts Kustomize remote resources and bases may be fetched
	// from (kustomizeRemoteHosts); none: every remote entry is refused.
	RemoteHosts []RemoteHost
	// ExtraImagePaths are image fields of custom resources, found beside the
	// built-in ones by Renderer.Open (FindImages).
	ExtraImagePaths []ExtraPath
	// Directory are Argo CD's directory options, read when the app is a directory
	// of plain manifests (no chart, no kustomization) and ignored otherwise.
	Directory DirectoryOptions
}

// DirectoryOptions are Argo CD's spec.source.directory options (recurse, include,
// exclude) for a directory of plain manifests. The zero value is Argo CD's default:
// the files of the app directory itself, every one.
type DirectoryOptions struct {
	// Recurse reads the subdirectories too (directory.recurse).
	Recurse bool `json:"recurse,omitempty"`
	// Include, when set, reads only the files whose path relative to the app
	// directory matches this glob (directory.include; see internal/argoglob).
	Include string `json:"include,omitempty"`
	// Exclude skips the files whose relative path matches this glob
	// (directory.exclude); it wins over Include.
	Exclude string `json:"exclude,omitempty"`
}

// Rendered is the result of Render: the source kind and the objects in the order the
// underlying tool (helm template, kustomize build, the directory walk) printed them.
type Rendered struct {
	Kind    SourceKind
	Objects []*kyaml.RNode
	// Remote lists the remote Kustomize inputs the render fetched (hosts in
	// Options.RemoteHosts), in the order fetched.
	Remote []RemoteInput
}

// RemoteInput is one remote Kustomize entry a render fetched: what it was, and for
// a git repository the commit its ref named at that moment.
type RemoteInput struct {
	// Entry is the entry as the kustomization wrote it (a URL's password removed).
	Entry string `json:"entry"`
	// Fetched is the file's URL, or the git repository's.
	Fetched string `json:"fetched"`
	// Commit is the commit of a git repository ("" for a file).
	Commit string `json:"commit,omitempty"`
}

// String is the input as one line of a report.
func (r RemoteInput) String() string {
	if r.Commit != "" {
		return fmt.Sprintf("%s (git %s at commit %s)", r.Entry, r.Fetched, r.Commit)
	}
	return r.Entry
}

// Detect reports how Render will treat dir: Chart.yaml means Helm, a kustomization
// file (kustomization.yaml, kustomization.yml, Kustomization) means Kustomize,
// anything else is a directory of manifests.
func Detect(dir string) (SourceKind, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return "", fmt.Errorf("application directory: %w", err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("application directory %s is not a directory", dir)
	}
	if isFile(filepath.Join(dir, "Chart.yaml")) {
		return SourceHelm, nil
	}
	for _, n := range kustomizationNames {
		if isFile(filepath.Join(dir, n)) {
			return SourceKustomize, nil
		}
	}
	return SourceDirectory, nil
}

var kustomizationNames = []string{"kustomization.yaml", "kustomization.yml", "Kustomization"}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

// Render renders the application source in dir.
func Render(ctx context.Context, dir string, opts Options) (*Rendered, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("application directory %s: %w", dir, err)
	}
	kind, err := Detect(abs)
	if err != nil {
		return nil, err
	}
	b, err := newBoundary(opts.RepoRoot, abs)
	if err != nil {
		return nil, err
	}
	var objs []*kyaml.RNode
	var remote []RemoteInput
	switch kind {
	case SourceHelm:
		objs, err = renderHelm(ctx, abs, b, opts)
	case SourceKustomize:
		objs, remote, err = renderKustomize(ctx, abs, b, opts.RemoteHosts)
	default:
		objs, err = renderDirectory(ctx, abs, opts.Directory)
	}
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return &Rendered{Kind: kind, Objects: objs, Remote: remote}, nil
}

// ErrDeadline marks a render stopped at the deadline of its context (Helm's
// template engine and Kustomize do not watch a context): the render returns at once;
// the stopped work finishes in the background and its result is dropped. It wraps
// the context's error (context.DeadlineExceeded or context.Canceled).
var ErrDeadline = errors.New("render stopped at its deadline")

// bounded runs fn and returns its result, or returns at ctx.Done with an error
// wrapping ErrDeadline and ctx.Err(). fn keeps running in its goroutine until it
// finishes (Go cannot stop it); its result is then dropped.
func bounded[T any](ctx context.Context, fn func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := fn()
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, fmt.Errorf("%w (%w); the render took longer than the time it was given", ErrDeadline, ctx.Err())
	}
}

// ErrUnsupported marks a source that uses a feature the sidecar refuses: an
// undownloaded Helm dependency, Kustomize's helmCharts, Kustomize plugins.
var ErrUnsupported = errors.New("unsupported by argocd-image-resolver")

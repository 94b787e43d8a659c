package argocde2e

// The fidelity corpus: apps that Argo CD renders natively (Helm, Kustomize, plain YAML),
// read at test time from the checkout and from the Go module cache (Helm's, Argo CD's own
// test data), each rendered by Argo CD itself and through the plugin with a policy that
// names no image, and compared as Argo CD compares manifests: object by object.

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"
)

// CorpusSource is a tree copied whole into the fidelity repository, so that the relative
// references between its apps (a Kustomize base, a values file) hold, and the apps in it.
type CorpusSource struct {
	Prefix string // the apps' name prefix and the tree's directory in the repository
	Module string // module@version whose directory holds the tree; "" = the checkout
	Dir    string // the tree inside the module or checkout
	// Plain lists the plain-YAML apps of the tree (directories without a chart or a
	// kustomization are not apps unless listed: a chart's templates/ is no app).
	Plain []string
	// Skip lists apps left out, each with the reason (a test that cannot run here).
	Skip map[string]string
}

// CorpusApp is one app of the corpus.
type CorpusApp struct {
	Name   string // a DNS label: the Applications are fn-Name (native) and fp-Name (plugin)
	Path   string // in the fidelity repository
	Type   string // Helm, Kustomize or Directory, as Argo CD's discovery says
	Origin string // module@version/dir/app, or testdata/apps/app
}

// fidelitySources is the corpus. Every chart and kustomization of these trees is an
// app, except those skipped with a reason.
var fidelitySources = []CorpusSource{
	{Prefix: "t", Dir: "testdata/apps", Plain: []string{"plain-cron", "arm64-pinned"}},
	// Charts of our own for what the trees above do not render as objects: a parent
	// chart's null values (Helm's issue-9027 chart prints values, not objects) and what
	// a chart sees of the cluster and the release.
	{Prefix: "e", Dir: "e2e/argocd/testdata/fidelity"},
	{Prefix: "h", Module: "helm.sh/helm/v4@v4.3.1", Dir: "pkg/cmd/testdata/testcharts"},
	{Prefix: "k", Module: "github.com/argoproj/argo-cd/v3@v3.6.1", Dir: "util/kustomize/testdata", Skip: map[string]string{
		"kustomize-with-version-override": "its .argocd-source.yaml sets a Kustomize version: Argo CD itself refuses it as a plugin app",
	}},
	{Prefix: "u", Module: "github.com/argoproj/argo-cd/v3@v3.6.1", Dir: "util/helm/testdata"},
	{Prefix: "r", Module: "github.com/argoproj/argo-cd/v3@v3.6.1", Dir: "reposerver/repository/testdata",
		Skip: map[string]string{
			"app-parameters/multi":              "its .argocd-source.yaml sets Kustomize overrides: Argo CD itself refuses it as a plugin app",
			"app-parameters/single-global":      "its .argocd-source.yaml sets Kustomize overrides: Argo CD itself refuses it as a plugin app",
			"app-parameters/single-global-helm": "its .argocd-source.yaml sets Helm overrides: Argo CD itself refuses it as a plugin app",
			"app-parameters/single-app-only":    "its .argocd-source.yaml sets overrides: Argo CD itself refuses it as a plugin app",
		},
		Plain: []string{"several-files", "recurse", "app-include-exclude", "concatenated", "json-list", "valid-json", "empty-list", "null-list", "yaml-with-empty-document", "irrelevant-yaml", "nil-metadata-accessors"}},
	{Prefix: "a", Module: "github.com/argoproj/argo-cd/v3@v3.6.1", Dir: "test/e2e/testdata",
		Plain: []string{"hook", "sync-waves", "two-nice-pods", "multi-namespace", "global-with-no-namespace", "deployment", "secrets", "networking", "cluster-role"},
		Skip: map[string]string{
			"helm-repo":                       "a chart repository served by Argo CD's own e2e fixture",
			"helm-oci-with-dependencies":      "an OCI registry the e2e fixture serves",
			"https-kustomize-base":            "a base on github.com: no network here",
			"ssh-kustomize-base":              "a base on github.com over SSH: no network here",
			"kustomize-with-version-override": "its .argocd-source.yaml sets a Kustomize version: Argo CD itself refuses it as a plugin app",
		}},
}

// moduleDir is the module cache directory of module@version, downloaded if missing
// (with go1.27.3, which e2e/build/build.sh also uses, for a module that needs it).
func moduleDir(modVer string) (string, error) {
	var last error
	for _, toolchain := range []string{"local", "go1.27.3"} {
		cmd := exec.Command("go", "mod", "download", "-json", modVer)
		cmd.Env = append(os.Environ(), "GOFLAGS=", "GOTOOLCHAIN="+toolchain)
		out, err := cmd.Output()
		var r struct{ Dir, Error string }
		if jerr := json.Unmarshal(out, &r); jerr == nil && r.Dir != "" && r.Error == "" {
			return r.Dir, nil
		}
		last = fmt.Errorf("go mod download %s (GOTOOLCHAIN=%s): %v %s", modVer, toolchain, err, r.Error)
		if !strings.Contains(r.Error, "requires go") {
			break
		}
	}
	return "", last
}

var nonLabel = regexp.MustCompile(`[^a-z0-9]+`)

// appName turns prefix and path into a DNS label of at most 50 characters (the
// Applications add "fn-"/"fp-", the namespaces "fid-"); a longer one is cut and told
// apart by a hash of the path.
func appName(prefix, path string) string {
	n := prefix + "-" + strings.Trim(nonLabel.ReplaceAllString(strings.ToLower(path), "-"), "-")
	if len(n) > 50 {
		sum := sha256.Sum256([]byte(path))
		n = strings.TrimRight(n[:42], "-") + "-" + hex.EncodeToString(sum[:])[:7]
	}
	return n
}

// BuildCorpus copies every source into work (the fidelity repository's work tree,
// without the plugin's policy files: the policy names no image) and lists the apps.
func BuildCorpus(root, work string) (apps []CorpusApp, skipped []string, err error) {
	names := map[string]string{}
	for _, s := range fidelitySources {
		src := filepath.Join(root, s.Dir)
		origin := s.Dir
		if s.Module != "" {
			d, err := moduleDir(s.Module)
			if err != nil {
				return nil, nil, err
			}
			src, origin = filepath.Join(d, s.Dir), s.Module+"/"+s.Dir
		}
		dst := filepath.Join(work, s.Prefix)
		if err := copyTree(src, dst, func(rel string) bool { return filepath.Base(rel) == ".argocd-image-resolver.yaml" }); err != nil {
			return nil, nil, fmt.Errorf("copy %s: %w", origin, err)
		}
		found, err := discoverApps(dst, s.Plain)
		if err != nil {
			return nil, nil, err
		}
		for _, rel := range found {
			if why, ok := s.Skip[rel]; ok {
				skipped = append(skipped, fmt.Sprintf("%s/%s: %s", origin, rel, why))
				continue
			}
			a := CorpusApp{Name: appName(s.Prefix, rel), Path: filepath.ToSlash(filepath.Join(s.Prefix, rel)), Origin: origin + "/" + rel}
			if prev, dup := names[a.Name]; dup {
				return nil, nil, fmt.Errorf("corpus apps %s and %s get the same name %s", prev, a.Origin, a.Name)
			}
			names[a.Name] = a.Origin
			a.Type = sourceType(filepath.Join(work, a.Path))
			apps = append(apps, a)
		}
		for rel, why := range s.Skip {
			if _, err := os.Stat(filepath.Join(dst, rel)); err == nil && !contains(found, rel) {
				skipped = append(skipped, fmt.Sprintf("%s/%s: %s", origin, rel, why))
			}
		}
	}
	sort.Strings(skipped)
	return apps, skipped, nil
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// discoverApps lists, relative to dir, each directory holding a chart or a
// kustomization that is not inside a chart (a chart's charts/ and templates/ are parts of
// it), plus the plain directories named.
func discoverApps(dir string, plain []string) ([]string, error) {
	var apps []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." || sourceType(p) == "Directory" {
			return nil // the tree's own root is where its apps are, not one of them
		}
		apps = append(apps, filepath.ToSlash(rel))
		if _, err := os.Stat(filepath.Join(p, "Chart.yaml")); err == nil {
			return filepath.SkipDir // its subcharts are not apps of their own
		}
		return nil
	})
	for _, p := range plain {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			return nil, fmt.Errorf("plain app %s of the corpus: %w", p, err)
		}
		if typ := sourceType(filepath.Join(dir, p)); typ != "Directory" {
			return nil, fmt.Errorf("plain app %s of the corpus is a %s app, found without being listed", p, typ)
		}
		apps = append(apps, p)
	}
	sort.Strings(apps)
	return apps, err
}

// sourceType is what Argo CD's discovery (util/app/discovery) makes of a directory: a
// kustomization wins over a chart (its walk sets Kustomize after Helm for one directory).
func sourceType(dir string) string {
	for _, k := range []string{"kustomization.yaml", "kustomization.yml", "Kustomization"} {
		if _, err := os.Stat(filepath.Join(dir, k)); err == nil {
			return "Kustomize"
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "Chart.yaml")); err == nil {
		return "Helm"
	}
	return "Directory"
}

// copyTree copies src into dst (files, directories and symbolic links as they are),
// leaving out what skip says.
func copyTree(src, dst string, skip func(rel string) bool) error {
	return filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if rel != "." && skip != nil && skip(rel) {
			return nil
		}
		target := filepath.Join(dst, rel)
		switch {
		case d.Type()&os.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(link, target)
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, info.Mode().Perm()|0o600)
	})
}

// FidelityApplications is the Applications of the corpus as one YAML stream for
// kubectl apply: per app a native one (fn-) and a plugin one (fp-), both rendering into
// namespace fid-NAME; the native Helm release is named as the plugin names it (after
// its Application), so that .Release.Name agrees.
func FidelityApplications(repoURL string, apps []CorpusApp) []byte {
	var b bytes.Buffer
	for _, a := range apps {
		for _, native := range []bool{true, false} {
			name, src := "fp-"+a.Name, fmt.Sprintf("plugin: {name: %s}", PluginName)
			if native {
				name, src = "fn-"+a.Name, ""
				if a.Type == "Helm" {
					src = fmt.Sprintf("helm: {releaseName: fp-%s}", a.Name)
				}
			}
			fmt.Fprintf(&b, `---
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {name: %s, namespace: argocd, labels: {e2e-fidelity: "true"}}
spec:
  project: default
  destination: {server: https://kubernetes.default.svc, namespace: fid-%s}
  source:
    repoURL: %s
    targetRevision: main
    path: %s
`, name, a.Name, repoURL, a.Path)
			if src != "" {
				fmt.Fprintf(&b, "    %s\n", src)
			}
		}
	}
	return b.Bytes()
}

// ManifestsAnswer is argocd-server's answer to GET /api/v1/applications/NAME/manifests,
// what `argocd app manifests` prints: each object as JSON, in the order rendered.
type ManifestsAnswer struct {
	Manifests  []string `json:"manifests"`
	SourceType string   `json:"sourceType"`
	Revision   string   `json:"revision"`
	Error      string   `json:"-"` // the render's error, when Argo CD could not render
}

// ManifestsAPI asks argocd-server for an app's manifests as the CLI does, with a token
// from Token; a render that fails is an answer with Error set, not an error.
func (l *Lab) ManifestsAPI(token, name string) (ManifestsAnswer, error) {
	req, _ := http.NewRequest(http.MethodGet, "http://"+l.ServerAddr+"/api/v1/applications/"+url.PathEscape(name)+"/manifests", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	client := *httpClient
	client.Timeout = 120 * time.Second
	resp, err := client.Do(req)
	if err != nil {
		return ManifestsAnswer{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return ManifestsAnswer{}, err
	}
	var a ManifestsAnswer
	if resp.StatusCode != http.StatusOK {
		var e struct{ Message string }
		_ = json.Unmarshal(body, &e)
		if e.Message == "" {
			e.Message = resp.Status + ": " + string(body)
		}
		a.Error = e.Message
		return a, nil
	}
	return a, json.Unmarshal(body, &a)
}

// Fidelity is how the plugin's render of an app compares with Argo CD's.
type Fidelity struct {
	Outcome string // same, refused-both, differs
	Detail  string // for differs: what differs (objects, first differing line)
}

// trackingKeys are where Argo CD writes the Application's name into each object
// (label tracking in v2, annotation tracking in v3); compared with the name normalised.
var trackingKeys = []string{"app.kubernetes.io/instance", "argocd.argoproj.io/tracking-id"}

// CompareManifests compares two renders object by object, as Argo CD compares desired
// and live state: objects keyed by group, kind, namespace and name, each byte for byte
// as argocd-server sends it, with the Application's name in the tracking label or
// annotation as the only normalisation. Order is not compared (Argo CD keys objects; the
// sync order comes from waves and hooks, which are in the objects).
func CompareManifests(native, plugin ManifestsAnswer, nativeApp, pluginApp string) Fidelity {
	switch {
	case native.Error != "" && plugin.Error != "":
		return Fidelity{Outcome: "refused-both", Detail: "native: " + oneLine(native.Error) + "\nplugin: " + oneLine(plugin.Error)}
	case native.Error != "":
		return Fidelity{Outcome: "differs", Detail: "Argo CD refused, the plugin rendered: " + oneLine(native.Error)}
	case plugin.Error != "":
		return Fidelity{Outcome: "differs", Detail: "Argo CD rendered, the plugin refused: " + oneLine(plugin.Error)}
	}
	n, err := keyed(native.Manifests, nativeApp, pluginApp)
	if err != nil {
		return Fidelity{Outcome: "differs", Detail: "native: " + err.Error()}
	}
	p, err := keyed(plugin.Manifests, nativeApp, pluginApp)
	if err != nil {
		return Fidelity{Outcome: "differs", Detail: "plugin: " + err.Error()}
	}
	var diffs []string
	for k, nv := range n {
		pv, ok := p[k]
		switch {
		case !ok:
			diffs = append(diffs, "only Argo CD renders "+k)
		case nv != pv:
			diffs = append(diffs, k+" differs: "+firstDifference(nv, pv))
		}
	}
	for k := range p {
		if _, ok := n[k]; !ok {
			diffs = append(diffs, "only the plugin renders "+k)
		}
	}
	if len(diffs) == 0 {
		return Fidelity{Outcome: "same"}
	}
	sort.Strings(diffs)
	return Fidelity{Outcome: "differs", Detail: strings.Join(diffs, "\n")}
}

// keyed maps each object's group/kind/namespace/name to its JSON with either app's name
// in the tracking label and annotation replaced by APP (a chart may set the label to its
// release name, the plugin app's name on both sides, where Argo CD tracks by annotation).
func keyed(manifests []string, apps ...string) (map[string]string, error) {
	out := map[string]string{}
	for _, m := range manifests {
		var o map[string]any
		if err := json.Unmarshal([]byte(m), &o); err != nil {
			return nil, fmt.Errorf("object %.80s: %w", m, err)
		}
		meta, _ := o["metadata"].(map[string]any)
		for _, field := range []string{"labels", "annotations"} {
			kv, _ := meta[field].(map[string]any)
			for _, k := range trackingKeys {
				for _, app := range apps {
					if v, ok := kv[k].(string); ok && (v == app || strings.HasPrefix(v, app+":")) {
						kv[k] = "APP" + strings.TrimPrefix(v, app)
					}
				}
			}
		}
		apiVersion, _ := o["apiVersion"].(string)
		group, _, _ := strings.Cut(apiVersion, "/")
		if !strings.Contains(apiVersion, "/") {
			group = ""
		}
		kind, _ := o["kind"].(string)
		ns, _ := meta["namespace"].(string)
		name, _ := meta["name"].(string)
		b, err := json.Marshal(o)
		if err != nil {
			return nil, err
		}
		key := group + "/" + kind + "/" + ns + "/" + name
		if _, dup := out[key]; dup {
			key += fmt.Sprintf(" (#%d)", len(out))
		}
		out[key] = string(b)
	}
	return out, nil
}

// firstDifference shows where two JSON texts part, with some context.
func firstDifference(a, b string) string {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	from := max(0, i-60)
	return fmt.Sprintf("Argo CD …%s… plugin …%s…", a[from:min(len(a), i+60)], b[from:min(len(b), i+60)])
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

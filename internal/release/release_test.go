package release

import (
	"archive/zip"
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/deploy/image"
	"github.com/argocd-image-resolver/argocd-image-resolver/pin/gittest"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"sigs.k8s.io/yaml"
)

const releasedChangelog = "# Changelog\n\n## [Unreleased]\n\n## [0.1.0] - Unreleased\n\n### Added\n\n- everything\n"

// gitRepo commits files in a new git repository at commit time 2026-01-02T03:04:05Z.
func gitRepo(t *testing.T, files map[string]string) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		gittest.RequireOrSkip(t, "", "git is not on PATH (Debian: apt-get install git)")
	}
	root := writeTree(t, files)
	for _, args := range [][]string{
		{"init", "-q"}, {"add", "-A"},
		{"-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-q", "-m", "release"},
	} {
		cmd := exec.Command("git", args...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "GIT_COMMITTER_DATE=2026-01-02T03:04:05Z", "GIT_AUTHOR_DATE=2026-01-02T03:04:05Z")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	return root
}

// TestCheck checks what make release refuses, before it builds anything, and what it
// plans for a release it accepts.
func TestCheck(t *testing.T) {
	files := agreeingTree()
	files["CHANGELOG.md"] = releasedChangelog
	tests := []struct {
		name    string
		version string
		change  map[string]string
		dirty   bool
		want    string
	}{
		{"not vX.Y.Z", "0.1.0", nil, false, `VERSION "0.1.0" is not vX.Y.Z`},
		{"pre-release", "v0.1.0-rc.1", nil, false, "no pre-release or build suffix"},
		{"make's default", "68dc422-dirty", nil, false, "make release VERSION=v0.1.0"},
		{"no section", "v0.2.0", nil, false, `CHANGELOG.md has no section for v0.2.0: add "## [0.2.0] - YYYY-MM-DD"`},
		{"no CHANGELOG", "v0.1.0", map[string]string{"CHANGELOG.md": ""}, false, "no section for v0.1.0"},
		{"not the newest", "v0.1.0", map[string]string{"CHANGELOG.md": "## [0.2.0] - 2027-01-01\n\n## [0.1.0] - 2026-01-01\n"}, false,
			"CHANGELOG.md's newest version is [0.2.0] (line 1), not v0.1.0"},
		{"bad CHANGELOG", "v0.1.0", map[string]string{"CHANGELOG.md": "## [0.1.0] - soon\n"}, false, "CHANGELOG.md:1: heading"},
		{"manifest names another version", "v0.1.0", map[string]string{"deploy/sidecar.yaml": "image: ghcr.io/argocd-image-resolver/argocd-image-resolver:v0.0.9\n"}, false,
			"deploy/sidecar.yaml:1: ghcr.io/argocd-image-resolver/argocd-image-resolver:v0.0.9"},
		{"dirty", "v0.1.0", nil, true, "is dirty (git status --porcelain):\n  ?? notes.txt\ncommit or stash the changes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := map[string]string{}
			for p, c := range files {
				fs[p] = c
			}
			for p, c := range tt.change {
				fs[p] = c
			}
			root := gitRepo(t, fs)
			if tt.dirty {
				if err := os.WriteFile(filepath.Join(root, "notes.txt"), []byte("wip"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			p, err := Check(context.Background(), root, tt.version, "")
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Check(%s) = %+v, %v; want an error saying %q", tt.version, p, err, tt.want)
			}
		})
	}

	t.Run("accepted", func(t *testing.T) {
		root := gitRepo(t, files)
		p, err := Check(context.Background(), root, "v0.1.0", "")
		if err != nil {
			t.Fatal(err)
		}
		if p.Version != (Version{0, 1, 0}) || len(p.Commit) != 40 || !p.Created.Equal(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) ||
			p.Notes.Body != "### Added\n\n- everything" {
			t.Errorf("plan %+v", p)
		}
		if len(p.Warnings) != 1 || !strings.Contains(p.Warnings[0], "CHANGELOG.md:5: [0.1.0] is marked Unreleased") {
			t.Errorf("warnings %q, want one about the Unreleased date", p.Warnings)
		}
		p, err = Check(context.Background(), root, "v0.1.0", "1700000000")
		if err != nil || !p.Created.Equal(time.Unix(1700000000, 0)) {
			t.Errorf("with SOURCE_DATE_EPOCH: %+v, %v", p, err)
		}
	})
}

// componentObjects are what the component adds to Argo CD besides the sidecar.
var componentObjects = []string{
	"ConfigMap argocd-image-resolver-plugin",
	"Role argocd-image-resolver",
	"RoleBinding argocd-image-resolver",
	"Service argocd-image-resolver-metrics",
	"Service argocd-image-resolver-webhooks",
}

// objects lists "Kind name" of a multi-document YAML, checking that none has a namespace.
func objects(t *testing.T, data []byte) []string {
	t.Helper()
	var out []string
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var o struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name, Namespace string
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatalf("%v\n%s", err, doc)
		}
		if o.Kind == "" {
			continue // the header's comments
		}
		if o.Metadata.Namespace != "" {
			t.Errorf("%s %s has namespace %q; kubectl apply -n gives it", o.Kind, o.Metadata.Name, o.Metadata.Namespace)
		}
		out = append(out, o.Kind+" "+o.Metadata.Name)
	}
	slices.Sort(out)
	return out
}

// TestRenderInstall renders the component deploy/ as the release ships it and applies
// the patch as kubectl patch does (a strategic merge, the API server's own code) to
// Argo CD's repo-server Deployment from its install.yaml (module cache or proxy).
func TestRenderInstall(t *testing.T) {
	root := moduleRoot(t)
	in, err := RenderInstall(filepath.Join(root, "deploy"))
	if err != nil {
		t.Fatal(err)
	}
	if got := objects(t, in.Resources); !slices.Equal(got, componentObjects) {
		t.Errorf("install.yaml holds %v, want %v", got, componentObjects)
	}
	if in.PatchTarget != "Deployment argocd-repo-server" {
		t.Errorf("patch of %q", in.PatchTarget)
	}
	repoServer := argoCDRepoServer(t, root)
	original, err := json.Marshal(repoServer)
	if err != nil {
		t.Fatal(err)
	}
	patch, err := yaml.YAMLToJSON(in.Patch)
	if err != nil {
		t.Fatal(err)
	}
	merged, err := strategicpatch.StrategicMergePatch(original, patch, appsv1.Deployment{})
	if err != nil {
		t.Fatalf("kubectl patch --patch-file %s: %v", FilePatch, err)
	}
	var d appsv1.Deployment
	if err := json.Unmarshal(merged, &d); err != nil {
		t.Fatal(err)
	}
	var containers, volumes []string
	for _, c := range d.Spec.Template.Spec.Containers {
		containers = append(containers, c.Name)
	}
	for _, v := range d.Spec.Template.Spec.Volumes {
		volumes = append(volumes, v.Name)
	}
	if !slices.Equal(containers, []string{"argocd-repo-server", "image-resolver"}) && !slices.Equal(containers, []string{"image-resolver", "argocd-repo-server"}) {
		t.Errorf("patched containers %v, want repo-server's and the sidecar", containers)
	}
	for _, v := range []string{"var-files", "plugins", "image-resolver-plugin", "image-resolver-tmp"} {
		if !slices.Contains(volumes, v) {
			t.Errorf("patched volumes %v lack %s", volumes, v)
		}
	}

	bad := []struct{ name, kustomization, want string }{
		{"a Kustomization", "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n", `is a "Kustomization", want a Component`},
		{"two patches", "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\npatches:\n  - path: a.yaml\n  - path: b.yaml\n", "2 patches; release knows how to ship one"},
		{"a targeted patch", "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\npatches:\n  - path: a.yaml\n    target: {kind: Deployment}\n", "has a target or options"},
		{"an unknown field", "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\nresourcez: []\n", "resourcez"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			dir := writeTree(t, map[string]string{"kustomization.yaml": tt.kustomization, "a.yaml": "kind: Deployment\nmetadata: {name: x}\n", "b.yaml": "kind: Deployment\nmetadata: {name: y}\n"})
			if _, err := RenderInstall(dir); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("RenderInstall = %v, want an error saying %q", err, tt.want)
			}
		})
	}
}

// argoCDRepoServer is the argocd-repo-server Deployment of the newest Argo CD that
// e2e/build/versions.txt lists, from its module's zip (as deploy/'s tests read it).
func argoCDRepoServer(t *testing.T, root string) map[string]any {
	t.Helper()
	vf, err := os.Open(filepath.Join(root, "e2e", "build", "versions.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer vf.Close()
	var version string
	for sc := bufio.NewScanner(vf); sc.Scan() && version == ""; {
		if line := strings.TrimSpace(sc.Text()); line != "" && !strings.HasPrefix(line, "#") {
			version = line
		}
	}
	major, _, _ := strings.Cut(strings.TrimPrefix(version, "v"), ".")
	mod := "github.com/argoproj/argo-cd/v" + major + "@" + version
	cmd := exec.Command("go", "mod", "download", "-json", mod)
	cmd.Dir = t.TempDir() // outside this module, which does not require Argo CD
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=")
	out, _ := cmd.Output() // exits 1 for Argo CD's go version; the zip is there all the same
	var info struct{ Zip string }
	if err := json.Unmarshal(out, &info); err != nil || info.Zip == "" {
		t.Fatalf("go mod download %s (Argo CD's install.yaml; needs the module cache or the Go module proxy): %v %s", mod, err, out)
	}
	z, err := zip.OpenReader(info.Zip)
	if err != nil {
		t.Fatal(err)
	}
	defer z.Close()
	f, err := z.Open(mod + "/manifests/install.yaml")
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var o map[string]any
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatal(err)
		}
		if md, _ := o["metadata"].(map[string]any); o["kind"] == "Deployment" && md["name"] == "argocd-repo-server" {
			return o
		}
	}
	t.Fatalf("%s: no argocd-repo-server Deployment", mod)
	return nil
}

// TestBuild builds a release of this checkout (for this machine's architecture only:
// cross-compiling is TestArm64Binaries' and make release's) and checks what it wrote:
// the binaries, the image and its SBOM, install.yaml, the Helm values, the notes, and
// SHA256SUMS over every file. Check is TestCheck's: this tree may have changes.
func TestBuild(t *testing.T) {
	root := moduleRoot(t)
	data, err := os.ReadFile(filepath.Join(root, "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseChangelog("CHANGELOG.md", data)
	if err != nil {
		t.Fatal(err)
	}
	latest, _ := c.Latest()
	p := &Plan{Root: root, Version: latest.Version, Commit: "0123456789abcdef0123456789abcdef01234567",
		Created: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Notes: latest}
	out := filepath.Join(t.TempDir(), "release")
	o := Options{Out: out, Archs: []string{runtime.GOARCH}, LoadArch: runtime.GOARCH}
	res, err := Build(context.Background(), p, o)
	if err != nil {
		t.Fatal(err)
	}
	arch := "linux_" + runtime.GOARCH
	for _, f := range []string{arch + "/argocd-image-resolver", arch + "/argocd-image-resolver-generate", "image/index.json", "image/oci-layout",
		"image.tar", "sbom/" + arch + ".spdx.json", FileInstall, FilePatch, FileHelmValues, FileNotes} {
		if !slices.Contains(res.Files, f) {
			t.Errorf("the release lacks %s: %v", f, res.Files)
		}
	}
	// SHA256SUMS lists every other file, as sha256sum -c reads it.
	sums, err := os.ReadFile(filepath.Join(out, FileSums))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(sums)), "\n")
	if len(lines) != len(res.Files) {
		t.Errorf("%s has %d lines for %d files", FileSums, len(lines), len(res.Files))
	}
	for _, line := range lines {
		sum, file, ok := strings.Cut(line, "  ")
		got, err := fileSHA256(filepath.Join(out, filepath.FromSlash(file)))
		if !ok || err != nil || got != sum {
			t.Errorf("%s: %q: the file's sha256 is %s (%v)", FileSums, line, got, err)
		}
	}
	if err := image.Verify(filepath.Join(out, DirImage), filepath.Join(out, FileImageTar), res.Image, mustDigest(t, res)); err != nil {
		t.Error(err)
	}
	if res.Image.String() != image.Repository+":"+latest.Version.String() {
		t.Errorf("image %s", res.Image)
	}
	notes, err := os.ReadFile(filepath.Join(out, FileNotes))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(notes), "# argocd-image-resolver "+latest.Version.String()+"\n\n"+latest.Body+"\n") ||
		!strings.Contains(string(notes), mustDigest(t, res).String()) {
		t.Errorf("release notes:\n%s", notes)
	}
	install, err := os.ReadFile(filepath.Join(out, FileInstall))
	if err != nil {
		t.Fatal(err)
	}
	if got := objects(t, install); !slices.Equal(got, componentObjects) {
		t.Errorf("install.yaml holds %v", got)
	}
	if a, b := fileBytes(t, filepath.Join(out, FileHelmValues)), fileBytes(t, filepath.Join(root, "deploy/helm/values.yaml")); a != b {
		t.Error("helm-values.yaml differs from deploy/helm/values.yaml")
	}

	// A second build replaces the first; a directory that holds no release is kept.
	if _, err := Build(context.Background(), p, o); err != nil {
		t.Errorf("building over an earlier release: %v", err)
	}
	other := writeTree(t, map[string]string{"keep.txt": "mine"})
	o.Out = other
	if _, err := Build(context.Background(), p, o); err == nil || !strings.Contains(err.Error(), "holds no earlier release (no SHA256SUMS); not replacing it") {
		t.Errorf("Build into another directory = %v", err)
	}
	if _, err := os.Stat(filepath.Join(other, "keep.txt")); err != nil {
		t.Errorf("the other directory lost its file: %v", err)
	}
}

func mustDigest(t *testing.T, res *Result) v1.Hash {
	t.Helper()
	d, err := res.Index.Index.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func fileBytes(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

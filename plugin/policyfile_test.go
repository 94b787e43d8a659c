package plugin

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

func TestLoadPolicyFile(t *testing.T) {
	pol, err := LoadPolicy(appDir(t, fullFile), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(pol.Images) != 2 || pol.Images[0].Alias != "web" || pol.Images[1].Alias != "worker" {
		t.Fatalf("images = %+v", pol.Images)
	}
	web := img(t, pol, "web")
	wantSpec := resolve.PolicySpec{Strategy: "semver", Constraint: "~1.2", AllowTags: `regexp:^1\.`,
		IgnoreTags: []string{"*-rc*"}, Platforms: []string{"linux/amd64", "linux/arm64"}}
	if !reflect.DeepEqual(web.Spec, wantSpec) {
		t.Errorf("web spec = %+v, want %+v", web.Spec, wantSpec)
	}
	if web.Written != "registry.example.com/team/web" || web.Repo.String() != "registry.example.com/team/web" {
		t.Errorf("web image = %q %q", web.Written, web.Repo)
	}
	if web.Policy == nil || web.Policy.Strategy() != resolve.Semver || len(web.Policy.Platforms()) != 2 {
		t.Errorf("web policy = %+v", web.Policy)
	}
	wantSrc := map[string]string{}
	for _, k := range []string{"image", "strategy", "constraint", "allowTags", "ignoreTags", "platforms", "pinDigest"} {
		wantSrc[k] = "file .argocd-image-resolver.yaml key images.web." + k
	}
	if !reflect.DeepEqual(web.Source, wantSrc) {
		t.Errorf("web source = %v\nwant %v", web.Source, wantSrc)
	}
	worker := img(t, pol, "worker")
	if !worker.Spec.PinDigest || worker.Policy.Strategy() != resolve.NewestBuild ||
		!reflect.DeepEqual(worker.Spec.IgnoreTags, []string{"*-dirty, latest"}) || len(worker.Policy.IgnoreTags()) != 2 {
		t.Errorf("worker = %+v / %+v", worker.Spec, worker.Policy)
	}
	if pol.PinMode != PinOff || len(pol.Warnings) != 0 {
		t.Errorf("pin mode %q, warnings %q", pol.PinMode, pol.Warnings)
	}
}

func TestLoadPolicyFileForms(t *testing.T) {
	cases := []struct {
		name  string
		file  string
		check func(t *testing.T, pol *AppPolicy)
	}{
		{"empty file", "", func(t *testing.T, pol *AppPolicy) {
			if len(pol.Images) != 0 {
				t.Errorf("images %+v", pol.Images)
			}
		}},
		{"comments only", "# nothing yet\n", func(t *testing.T, pol *AppPolicy) {
			if len(pol.Images) != 0 {
				t.Errorf("images %+v", pol.Images)
			}
		}},
		{"null images", "images:\n", func(t *testing.T, pol *AppPolicy) {
			if len(pol.Images) != 0 {
				t.Errorf("images %+v", pol.Images)
			}
		}},
		{"constraint in image", "images:\n  web:\n    image: nginx:~1.25\n", func(t *testing.T, pol *AppPolicy) {
			web := img(t, pol, "web")
			if web.Spec.Constraint != "~1.25" || web.Written != "nginx" || web.Repo.String() != "index.docker.io/library/nginx" {
				t.Errorf("web = %+v", web)
			}
			if web.Source["constraint"] != "file .argocd-image-resolver.yaml key images.web.image" {
				t.Errorf("source = %v", web.Source)
			}
		}},
		{"registry with port", "images:\n  web:\n    image: localhost:5000/team/web:>=1.0 <2\n", func(t *testing.T, pol *AppPolicy) {
			web := img(t, pol, "web")
			if web.Written != "localhost:5000/team/web" || web.Spec.Constraint != ">=1.0 <2" {
				t.Errorf("web = %+v", web)
			}
		}},
		{"numeric constraint scalar", "images:\n  web:\n    image: nginx\n    constraint: 1.10\n", func(t *testing.T, pol *AppPolicy) {
			if c := img(t, pol, "web").Spec.Constraint; c != "1.10" {
				t.Errorf("constraint = %q, want the text as written", c)
			}
		}},
		{"quoted boolean", "images:\n  web:\n    image: nginx\n    pinDigest: \"true\"\n", func(t *testing.T, pol *AppPolicy) {
			if !img(t, pol, "web").Spec.PinDigest {
				t.Error("pinDigest false")
			}
		}},
		{"null field is unset", "images:\n  web:\n    image: nginx\n    strategy:\n", func(t *testing.T, pol *AppPolicy) {
			web := img(t, pol, "web")
			if web.Spec.Strategy != "" || web.Source["strategy"] != "" {
				t.Errorf("web = %+v", web)
			}
		}},
		{"slash alias", "images:\n  argoproj/argocd:\n    image: quay.io/argoproj/argocd\n", func(t *testing.T, pol *AppPolicy) {
			img(t, pol, "argoproj_argocd")
		}},
		{"deprecated strategy", "images:\n  web:\n    image: nginx\n    strategy: name\n", func(t *testing.T, pol *AppPolicy) {
			if got := img(t, pol, "web").Policy.Strategy(); got != resolve.Alphabetical {
				t.Errorf("strategy %q", got)
			}
			want := []string{`file .argocd-image-resolver.yaml key images.web.strategy (line 4): update-strategy "name" is deprecated; use "alphabetical"`}
			if !reflect.DeepEqual(pol.Warnings, want) {
				t.Errorf("warnings %q", pol.Warnings)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pol, err := LoadPolicy(appDir(t, tc.file), nil)
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, pol)
		})
	}
}

func TestPolicyFileErrors(t *testing.T) {
	cases := []struct {
		name string
		file string
		want []string
	}{
		{"syntax", "images:\n  web: [\n", []string{"file .argocd-image-resolver.yaml (line 2, column 8): YAML syntax: did not find expected node content"}},
		{"syntax: indent", "images:\n  web:\n    image: nginx\n   strategy: semver\n", []string{"file .argocd-image-resolver.yaml (line 4, column 4): YAML syntax: did not find expected key"}}, // yaml.v3: line 1
		{"syntax: in the second document", "images: {}\n---\nimages: {\n", []string{"file .argocd-image-resolver.yaml (line 3, column 9): YAML syntax: did not find expected node content"}},
		{"two documents", "images: {}\n---\nimages: {}\n", []string{"file .argocd-image-resolver.yaml (line 2): more than one YAML document"}},
		{"top level list", "- a\n", []string{"file .argocd-image-resolver.yaml (line 1): is a list (accepted: a mapping with keys images, pinMode, pinTarget, pinBranch, pinPush, pinPRGroup)"}},
		{"bad pinMode", "pinMode: always\n", []string{`file .argocd-image-resolver.yaml key pinMode (line 1): invalid value "always" (accepted: off`}},
		{"pinTarget not a string", "pinTarget: [pins]\n", []string{`file .argocd-image-resolver.yaml key pinTarget (line 1): is a list`}},
		{"unknown top key", "images: {}\nimagez: {}\n", []string{`file .argocd-image-resolver.yaml key imagez (line 2): unknown key; did you mean "images"? (accepted: images, pinMode, pinTarget, pinBranch, pinPush, pinPRGroup)`}},
		{"images a list", "images:\n  - web\n", []string{"key images (line 2): is a list (accepted: a mapping of alias to image policy)"}},
		{"unknown image key", "images:\n  web:\n    image: nginx\n    strategyy: semver\n", []string{`key images.web.strategyy (line 4): unknown key; did you mean "strategy"? (accepted: image, strategy, constraint, allowTags, ignoreTags, platforms, pinDigest, verify)`}},
		{"image-updater spelling", "images:\n  web:\n    image: nginx\n    allow-tags: any\n", []string{`key images.web.allow-tags (line 4): unknown key; did you mean "allowTags"?`}},
		{"duplicate key", "images:\n  web:\n    image: nginx\n    image: redis\n", []string{"key images.web.image (line 4): duplicate key (first at line 3)"}},
		{"duplicate alias", "images:\n  web: {image: nginx}\n  web: {image: redis}\n", []string{"key images.web (line 3): duplicate key (first at line 2)"}},
		{"aliases equal after normalising", "images:\n  a/b: {image: nginx}\n  a_b: {image: redis}\n", []string{`key images.a_b (line 3): alias "a_b" is the same as images.a/b (line 2)`}},
		{"bad alias", "images:\n  my.app: {image: nginx}\n", []string{`key images.my.app (line 2): invalid alias: alias "my.app"`, "accepted: letters, digits"}},
		{"alias value a string", "images:\n  web: nginx\n", []string{`key images.web (line 2): is the scalar "nginx" (accepted: a mapping with keys image, strategy`}},
		{"strategy a list", "images:\n  web:\n    image: nginx\n    strategy: [semver]\n", []string{"key images.web.strategy (line 4): is a list (accepted: a string)"}},
		{"platforms a mapping", "images:\n  web:\n    image: nginx\n    platforms: {linux: amd64}\n", []string{"key images.web.platforms (line 4): is a mapping (accepted: a list of strings, or one comma-separated string)"}},
		{"platforms list of lists", "images:\n  web:\n    image: nginx\n    platforms: [[linux/amd64]]\n", []string{"key images.web.platforms (line 4): an item is a list"}},
		{"pinDigest not a bool", "images:\n  web:\n    image: nginx\n    pinDigest: yes\n", []string{`key images.web.pinDigest (line 4): invalid value "yes" (accepted: true or false)`}},
		{"yaml alias", "images:\n  web: &w\n    image: nginx\n  api: *w\n", []string{"key images.api (line 4): YAML aliases are not supported"}},
		{"constraint twice", "images:\n  web:\n    image: nginx:~1.2\n    constraint: ~1.3\n", []string{`key images.web.constraint (line 4): a constraint is given both here ("~1.3") and in key images.web.image`}},
		{"constraint twice, other order", "images:\n  web:\n    constraint: ~1.3\n    image: nginx:~1.2\n", []string{`key images.web.image (line 4): a constraint is given both here ("~1.2") and in key images.web.constraint`}},
		{"image with digest", "images:\n  web:\n    image: nginx@sha256:0000000000000000000000000000000000000000000000000000000000000000\n", []string{"file .argocd-image-resolver.yaml key images.web.image (line 3): invalid value", "use update-strategy digest"}},
		{"bad image", "images:\n  web:\n    image: UPPER/case\n", []string{`file .argocd-image-resolver.yaml key images.web.image (line 3): invalid value "UPPER/case"`, "accepted: repository[:constraint]"}},
		{"bad ignoreTags", "images:\n  web:\n    image: nginx\n    ignoreTags: ['[']\n", []string{`key images.web.ignoreTags (line 4): invalid value "["`}},
		{"bad platforms", "images:\n  web:\n    image: nginx\n    platforms: [linux]\n", []string{`key images.web.platforms (line 4): invalid value "linux"`, "accepted: os/arch[/variant]"}},
		{"bad allowTags", "images:\n  web:\n    image: nginx\n    allowTags: 'regex:^1'\n", []string{`key images.web.allowTags (line 4): invalid value "regex:^1" (accepted: regexp:EXPR, glob:PATTERN or any)`}},
		{"non-string key", "images:\n  [a]: {image: nginx}\n", []string{"key images (line 2): a key is a list (accepted: string keys)"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadPolicy(appDir(t, tc.file), nil)
			assertErr(t, err, tc.want...)
			var pe *PolicyError
			if !errors.As(err, &pe) {
				t.Errorf("error is a %T, not a *PolicyError (bad input: exit status 2)", err)
			}
			for _, line := range strings.Split(err.Error(), "\n") {
				if !strings.HasPrefix(line, "file .argocd-image-resolver.yaml") {
					t.Errorf("line %q does not name the file", line)
				}
			}
		})
	}
}

func TestPolicyFileSystemErrors(t *testing.T) {
	t.Run("yml spelling", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, ".argocd-image-resolver.yml"), []byte("images: {}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := LoadPolicy(dir, nil)
		assertErr(t, err, "file .argocd-image-resolver.yml: the policy file must be named .argocd-image-resolver.yaml")
	})
	t.Run("directory", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.Mkdir(filepath.Join(dir, PolicyFileName), 0o755); err != nil {
			t.Fatal(err)
		}
		_, err := LoadPolicy(dir, nil)
		assertErr(t, err, "file .argocd-image-resolver.yaml: not a regular file")
	})
	t.Run("too large", func(t *testing.T) {
		_, err := LoadPolicy(appDir(t, "# "+strings.Repeat("x", maxPolicyFileSize)), nil)
		assertErr(t, err, "file .argocd-image-resolver.yaml: larger than")
	})
	t.Run("message has no work directory", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.Mkdir(filepath.Join(dir, PolicyFileName), 0o755); err != nil {
			t.Fatal(err)
		}
		_, err := LoadPolicy(dir, nil)
		if err == nil || strings.Contains(err.Error(), dir) {
			t.Errorf("error %v names the directory", err)
		}
	})
}

func FuzzPolicyFile(f *testing.F) {
	for _, seed := range []string{
		"", fullFile, "images:\n", "images: {web: {image: nginx, constraint: '~1'}}\n",
		"images:\n  web: &a\n    image: nginx\n  api: *a\n", "- a\n", "images: {a/b: {image: 'nginx:>=1 <2', platforms: linux/arm64}}\n---\n",
		"images:\n  web:\n    image: ghcr.io/o/w\n    strategy: digest\n    constraint: latest\n    pinDigest: true\n",
		"images:\n  web:\n    image: ghcr.io/o/w\n    verify: {identity: 'regexp:^https://github.com/o/', issuer: https://token.actions.githubusercontent.com}\n",
	} {
		f.Add(seed, "")
	}
	f.Add("images: {web: {strategy: newest-build}}\n", `[{"name":"image-list","string":"web=nginx"}]`)
	f.Add("images: {web: {image: nginx, verify: {key: release}}}\n", `[{"name":"web.verify-identity","string":"x"},{"name":"verify-issuer","string":"y"}]`)
	f.Fuzz(func(t *testing.T, file, params string) {
		pf, err := parsePolicyFile([]byte(file))
		if err != nil {
			for _, line := range strings.Split(err.Error(), "\n") {
				if !strings.HasPrefix(line, "file ") {
					t.Errorf("error line %q does not name the file", line)
				}
			}
			return
		}
		p, _ := ParseParameters(params)
		pol, err := buildPolicy(pf, p)
		if err != nil {
			return
		}
		for i, ip := range pol.Images {
			if ip.Policy == nil || ip.Source[SourceImage] == "" {
				t.Errorf("incomplete image policy %+v", ip)
			}
			if i > 0 && pol.Images[i-1].Alias >= ip.Alias {
				t.Errorf("aliases out of order: %q, %q", pol.Images[i-1].Alias, ip.Alias)
			}
		}
	})
}

// TestPolicyFileConfined: the policy file may be a symbolic link to a shared file
// inside the repository checkout, never to one outside it, and a named pipe in its
// place is refused without blocking the render.
func TestPolicyFileConfined(t *testing.T) {
	const shared = "images: {web: {image: registry.example.com/team/web, constraint: '~1'}}\n"
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret.yaml"), []byte("images: {stolen: {image: x}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	repo := t.TempDir()
	app := filepath.Join(repo, "apps", "web")
	if err := os.MkdirAll(app, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, "policy.yaml"), []byte(shared), 0o644); err != nil {
		t.Fatal(err)
	}
	link := func(t *testing.T, target string) {
		t.Helper()
		p := filepath.Join(app, PolicyFileName)
		os.Remove(p)
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name, target, root string
		want               string // "" loads the shared file
	}{
		{"relative link inside the repository", "../../policy.yaml", repo, ""},
		{"absolute link inside the repository", filepath.Join(repo, "policy.yaml"), repo, "a symbolic link that is absolute or leads outside the repository checkout, refused (links within the repository must be relative)"},
		{"link outside the repository", filepath.Join(outside, "secret.yaml"), repo, "a symbolic link that is absolute or leads outside the repository checkout, refused (links within the repository must be relative)"},
		{"relative link climbing out", "../../../" + filepath.Base(outside) + "/secret.yaml", repo, "a symbolic link that is absolute or leads outside the repository checkout, refused (links within the repository must be relative)"},
		{"link to a sibling without a repository root", "../../policy.yaml", "", "a symbolic link that is absolute or leads outside the repository checkout, refused (links within the repository must be relative)"},
		{"dangling link", "../../missing.yaml", repo, "a symbolic link to a file that does not exist"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			link(t, tc.target)
			pol, err := LoadPolicyIn(tc.root, app, nil)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if len(pol.Images) != 1 || pol.Images[0].Alias != "web" {
					t.Fatalf("images = %+v, want the shared file's web", pol.Images)
				}
				return
			}
			assertErr(t, err, "file .argocd-image-resolver.yaml: "+tc.want)
			if strings.Contains(err.Error(), "stolen") || strings.Contains(err.Error(), outside) {
				t.Errorf("error %q shows what lies outside", err)
			}
			if _, aerr := Announcements(tc.root, app); aerr == nil || aerr.Error() != err.Error() {
				t.Errorf("announcement error %v, want the render's %v", aerr, err)
			}
		})
	}
	t.Run("named pipe", func(t *testing.T) {
		dir := t.TempDir()
		if err := syscall.Mkfifo(filepath.Join(dir, PolicyFileName), 0o644); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { _, err := LoadPolicy(dir, nil); done <- err }()
		select {
		case err := <-done:
			assertErr(t, err, "file .argocd-image-resolver.yaml: not a regular file, refused")
		case <-time.After(10 * time.Second):
			t.Fatal("reading a named pipe as the policy file blocked")
		}
	})
}

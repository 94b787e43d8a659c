package release

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseVersion(t *testing.T) {
	tests := []struct {
		in   string
		want Version
		err  string
	}{
		{"v0.1.0", Version{0, 1, 0}, ""},
		{"v12.3.45", Version{12, 3, 45}, ""},
		{"0.1.0", Version{}, `VERSION "0.1.0" is not vX.Y.Z`},
		{"v0.1", Version{}, `VERSION "v0.1" is not vX.Y.Z`},
		{"v0.1.0-rc.1", Version{}, "no pre-release or build suffix"},
		{"v01.0.0", Version{}, "without leading zeros"},
		{"68dc422-dirty", Version{}, `VERSION "68dc422-dirty" is not vX.Y.Z (e.g. make release VERSION=v0.1.0)`},
		{"", Version{}, `VERSION "" is not vX.Y.Z`},
	}
	for _, tt := range tests {
		got, err := ParseVersion(tt.in)
		if tt.err == "" {
			if err != nil || got != tt.want {
				t.Errorf("ParseVersion(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("ParseVersion(%q) = %v, %v; want an error saying %q", tt.in, got, err, tt.err)
		}
	}
}

const sampleChangelog = `# Changelog

Intro.

## [Unreleased]

- next

## [0.2.0] - 2027-01-02

### Added

- b

### Changed

### Fixed

- c

## [0.1.0] - Unreleased

- a

[0.2.0]: https://example.com/v0.2.0
[0.1.0]: https://example.com/v0.1.0
`

func TestParseChangelog(t *testing.T) {
	c, err := ParseChangelog("CHANGELOG.md", []byte(sampleChangelog))
	if err != nil {
		t.Fatal(err)
	}
	want := []Section{
		{Unreleased: true, Line: 5, Body: "- next"},
		{Version: Version{0, 2, 0}, Date: "2027-01-02", Line: 9, Body: "### Added\n\n- b\n\n### Fixed\n\n- c"},
		{Version: Version{0, 1, 0}, Date: "Unreleased", Line: 21, Body: "- a"},
	}
	if len(c.Sections) != len(want) {
		t.Fatalf("sections %+v", c.Sections)
	}
	for i := range want {
		if c.Sections[i] != want[i] {
			t.Errorf("section %d: %+v, want %+v", i, c.Sections[i], want[i])
		}
	}
	if l, ok := c.Latest(); !ok || l.Version != (Version{0, 2, 0}) {
		t.Errorf("Latest = %+v, %v", l, ok)
	}
	if s, ok := c.Section(Version{0, 1, 0}); !ok || s.Line != 21 {
		t.Errorf("Section(0.1.0) = %+v, %v", s, ok)
	}
	if _, ok := c.Section(Version{0, 3, 0}); ok {
		t.Error("Section(0.3.0) found")
	}

	bad := []struct{ name, text, want string }{
		{"no brackets", "## 0.1.0 - 2026-01-01\n", `CHANGELOG.md:1: heading "## 0.1.0 - 2026-01-01": not a version heading`},
		{"a v", "## [v0.1.0] - 2026-01-01\n", "CHANGELOG.md:1: heading \"## [v0.1.0] - 2026-01-01\": the version is not X.Y.Z"},
		{"bad date", "\n## [0.1.0] - yesterday\n", "CHANGELOG.md:2: heading \"## [0.1.0] - yesterday\": the date is not YYYY-MM-DD or Unreleased"},
		{"no date", "## [0.1.0]\n", "the date is not YYYY-MM-DD or Unreleased"},
		{"dated Unreleased", "## [Unreleased] - 2026-01-01\n", "the [Unreleased] section has no date"},
		{"old first", "## [0.1.0] - 2026-01-01\n## [0.2.0] - 2026-02-01\n", "CHANGELOG.md:2: [0.2.0] after [0.1.0] (line 1): versions go newest first, each once"},
		{"twice", "## [0.1.0] - 2026-01-01\n## [0.1.0] - 2026-01-01\n", "[0.1.0] after [0.1.0]"},
		{"Unreleased last", "## [0.1.0] - 2026-01-01\n## [Unreleased]\n", "CHANGELOG.md:2: [Unreleased] after [0.1.0] (line 1): it comes first"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := ParseChangelog("CHANGELOG.md", []byte(tt.text)); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ParseChangelog = %v, want an error saying %q", err, tt.want)
			}
		})
	}
}

// writeTree writes files (path -> content) under a new directory.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, content := range files {
		full := filepath.Join(root, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// agreeingTree is a tree whose manifests and docs name v0.1.0.
func agreeingTree() map[string]string {
	return map[string]string{
		"deploy/sidecar.yaml":          "kind: Deployment\nspec:\n  image: ghcr.io/argocd-image-resolver/argocd-image-resolver:v0.1.0\n",
		"deploy/kustomization.yaml":    "# components:\n#   - https://github.com/argocd-image-resolver/argocd-image-resolver//deploy?ref=v0.1.0\n",
		"deploy/image/testdata/x.yaml": "image: ghcr.io/argocd-image-resolver/argocd-image-resolver:v9.9.9\n",
		"docs/quickstart.md":           "Install:\n\n    - https://github.com/argocd-image-resolver/argocd-image-resolver//deploy?ref=v0.1.0\n",
		"docs/other.md":                "a base: https://github.com/org/repo//deploy?ref=v1, an image ghcr.io/org/web:v2\n",
		"README.md":                    "make image IMAGE=registry.example.com/argocd-image-resolver:v7.0.0\n",
	}
}

func TestCheckVersions(t *testing.T) {
	v010 := Version{0, 1, 0}
	if err := CheckVersions(writeTree(t, agreeingTree()), v010); err != nil {
		t.Errorf("an agreeing tree: %v", err)
	}
	tests := []struct {
		name   string
		change map[string]string
		want   []string
	}{
		{"manifest image tag", map[string]string{"deploy/sidecar.yaml": "\n\n  image: ghcr.io/argocd-image-resolver/argocd-image-resolver:v0.2.0\n"},
			[]string{"1 place names another version than v0.1.0", "deploy/sidecar.yaml:3: ghcr.io/argocd-image-resolver/argocd-image-resolver:v0.2.0"}},
		{"doc ref", map[string]string{"docs/quickstart.md": "x\ny\nhttps://github.com/argocd-image-resolver/argocd-image-resolver//deploy/monitoring?ref=main\n"},
			[]string{"docs/quickstart.md:3: ?ref=main"}},
		{"README ref with another parameter", map[string]string{"README.md": "https://github.com/argocd-image-resolver/argocd-image-resolver//deploy?timeout=2m&ref=v0.0.9\n"},
			[]string{"README.md:1: ?ref=v0.0.9"}},
		{"helm values", map[string]string{"deploy/helm/values.yaml": "image: \"ghcr.io/argocd-image-resolver/argocd-image-resolver:v0.1.1\"\n"},
			[]string{"deploy/helm/values.yaml:1: ghcr.io/argocd-image-resolver/argocd-image-resolver:v0.1.1"}},
		{"no image", map[string]string{"deploy/sidecar.yaml": "kind: Deployment\n"},
			[]string{"found 0 image tags", "want at least one of each"}},
		{"no ref", map[string]string{"deploy/kustomization.yaml": "", "docs/quickstart.md": ""},
			[]string{"and 0 ?ref= of this repository"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			files := agreeingTree()
			for p, c := range tt.change {
				files[p] = c
			}
			err := CheckVersions(writeTree(t, files), v010)
			for _, w := range tt.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("CheckVersions = %v, want an error saying %q", err, w)
				}
			}
		})
	}
}

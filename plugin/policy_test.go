package plugin

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func ps(name, v string) Parameter { return Parameter{Name: name, Kind: KindString, String: v} }
func pa(name string, v ...string) Parameter {
	if v == nil {
		v = []string{}
	}
	return Parameter{Name: name, Kind: KindArray, Array: v}
}
func pm(name string, m map[string]string) Parameter {
	return Parameter{Name: name, Kind: KindMap, Map: m}
}

// appDir returns a directory holding the policy file with content (none if empty).
func appDir(t testing.TB, content string) string {
	t.Helper()
	dir := t.TempDir()
	if content != "" {
		if err := os.WriteFile(filepath.Join(dir, PolicyFileName), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

const fullFile = `images:
  web:
    image: registry.example.com/team/web
    strategy: semver
    constraint: "~1.2"
    allowTags: "regexp:^1\\."
    ignoreTags: ["*-rc*"]
    platforms: [linux/amd64, linux/arm64]
    pinDigest: false
  worker:
    image: ghcr.io/org/worker
    strategy: newest-build
    ignoreTags: "*-dirty, latest"
    platforms: linux/arm64
    pinDigest: true
`

func img(t *testing.T, pol *AppPolicy, alias string) ImagePolicy {
	t.Helper()
	for _, ip := range pol.Images {
		if ip.Alias == alias {
			return ip
		}
	}
	t.Fatalf("no alias %q in %+v", alias, pol.Images)
	return ImagePolicy{}
}

func TestLoadPolicyNothing(t *testing.T) {
	pol, err := LoadPolicy(appDir(t, ""), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(pol, &AppPolicy{PinMode: PinOff, Refresh: RefreshHard}) {
		t.Errorf("got %+v", pol)
	}
}

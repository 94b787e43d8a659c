package plugin_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/argocd-image-resolver/argocd-image-resolver/plugin"
)

// FuzzEnvFromEnviron: the parameters JSON Argo CD gives (ARGOCD_APP_PARAMETERS)
// reads to an environment whose policy loads, or to an error of one or more
// non-empty lines; nothing panics, nothing takes long.
func FuzzEnvFromEnviron(f *testing.F) {
	addSeeds(f, "FuzzEnvFromEnviron", "", "null", "[", `[{"name":""}]`, `[{"name":"image-list","array":[""]}]`)
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, params string) {
		environ := []string{"ARGOCD_APP_NAME=shop", "ARGOCD_APP_NAMESPACE=web", "ARGOCD_APP_PARAMETERS=" + params}
		var env *plugin.Env
		var err error
		timed(t, "EnvFromEnviron", func() { env, err = plugin.EnvFromEnviron(environ) })
		if err != nil {
			lines(t, err)
			return
		}
		if env == nil || env.AppName == "" {
			t.Fatalf("no error and no app: %+v", env)
		}
		var pol *plugin.AppPolicy
		timed(t, "LoadPolicy", func() { pol, err = plugin.LoadPolicy(dir, env.Parameters) })
		if err != nil {
			lines(t, err)
			return
		}
		complete(t, pol)
	})
}

// FuzzLoadPolicy: a policy file in the app directory loads to a complete policy, or
// to an error whose every line names the file or a parameter.
func FuzzLoadPolicy(f *testing.F) {
	addSeeds(f, "FuzzLoadPolicy", "", "images:\n", "images: [", "\xff", "images: {a: {image: 'b:c', strategy: x}}\n")
	f.Fuzz(func(t *testing.T, content string) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, plugin.PolicyFileName), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		var pol *plugin.AppPolicy
		var err error
		timed(t, "LoadPolicy", func() { pol, err = plugin.LoadPolicy(dir, nil) })
		if err != nil {
			for _, line := range lines(t, err) {
				if !strings.HasPrefix(line, "file ") && !strings.HasPrefix(line, "parameter ") && !strings.HasPrefix(line, "aliases ") {
					t.Fatalf("error line %q names neither the file nor a parameter", line)
				}
				if strings.Contains(line, dir) {
					t.Fatalf("error line %q names the directory", line)
				}
			}
			return
		}
		if pol == nil {
			t.Fatal("no error and no policy")
		}
		complete(t, pol)
	})
}

// lines returns the lines of err, failing t on an empty one.
func lines(t *testing.T, err error) []string {
	t.Helper()
	ls := strings.Split(err.Error(), "\n")
	for _, l := range ls {
		if strings.TrimSpace(l) == "" {
			t.Fatalf("error with an empty line: %q", err)
		}
	}
	return ls
}

func complete(t *testing.T, pol *plugin.AppPolicy) {
	t.Helper()
	for _, ip := range pol.Images {
		if ip.Policy == nil || ip.Alias == "" {
			t.Fatalf("incomplete image policy %+v", ip)
		}
	}
}

package config

import (
	"os"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/argocd-image-resolver/argocd-image-resolver/pin"
)

// git.maxRepositoryBytes is read from the git: section of the file, the
// environment and a flag, in that order of precedence, beside the section's
// other keys; a bad value is an error naming where it came from, the value and
// what is accepted.
func TestGitMaxRepositoryBytes(t *testing.T) {
	def := DefaultConfig()
	if got := def.Get("git.maxRepositoryBytes"); got != "256MiB" {
		t.Errorf("default %s, want 256MiB", got)
	}
	if got := (&Config{}).Get("git.maxRepositoryBytes"); got != "256MiB" {
		t.Errorf("a GitConfig built in code: %s, want the default 256MiB", got)
	}
	const file = "git:\n  author: \"Bot <bot@example.com>\"\n  maxRepositoryBytes: 64MiB\n"
	cases := []struct {
		name, file, env string
		flags           []string
		want            int64
		err             []string
	}{
		{name: "default", want: pin.DefaultMaxRepositoryBytes},
		{name: "file", file: file, want: 64 << 20},
		{name: "env over file", file: file, env: "1GiB", want: 1 << 30},
		{name: "flag over env", file: file, env: "1GiB", flags: []string{"--git-max-repository-bytes=512MiB"}, want: 512 << 20},
		{name: "bad in file", file: "git:\n  maxRepositoryBytes: lots\n", err: []string{"git.maxRepositoryBytes", "lots", "bytes, as an integer or with a unit"}},
		{name: "too small", env: "1KiB", err: []string{"IMAGE_RESOLVER_GIT_MAX_REPOSITORY_BYTES", "1KiB", "at least 1MiB"}},
		{name: "unknown git key", file: "git:\n  maxRepoBytes: 1GiB\n", err: []string{"maxRepoBytes", "maxRepositoryBytes"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env := map[string]string{}
			if c.file != "" {
				env["IMAGE_RESOLVER_CONFIG"] = writeTemp(t, c.file)
			}
			if c.env != "" {
				env["IMAGE_RESOLVER_GIT_MAX_REPOSITORY_BYTES"] = c.env
			}
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			f := AddFlags(fs)
			if err := fs.Parse(c.flags); err != nil {
				t.Fatal(err)
			}
			cfg, err := f.Load(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
			if c.err != nil {
				if err == nil {
					t.Fatalf("no error; git.maxRepositoryBytes %d", cfg.Git.MaxRepositoryBytes)
				}
				for _, want := range c.err {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error %q does not say %q", err, want)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Git.MaxRepositoryBytes != c.want {
				t.Errorf("git.maxRepositoryBytes %d, want %d", cfg.Git.MaxRepositoryBytes, c.want)
			}
			if c.file != "" && cfg.Git.Author != "Bot <bot@example.com>" {
				t.Errorf("the section's other keys: author %q", cfg.Git.Author)
			}
		})
	}
}

func writeTemp(t *testing.T, content string) string {
	t.Helper()
	p := t.TempDir() + "/config.yaml"
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

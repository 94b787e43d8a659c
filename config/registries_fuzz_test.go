package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// Fuzz targets for the operator's files: the registries file
// ($IMAGE_RESOLVER_REGISTRIES_CONFIG) and the configuration file
// ($IMAGE_RESOLVER_CONFIG). Seeds: testdata/fuzz/<Target>/* at the top of the
// repository, one input per file.

const perInput = 2 * time.Second

func addSeeds(f *testing.F, target string) {
	f.Helper()
	files, err := filepath.Glob(filepath.Join("..", "testdata", "fuzz", target, "*"))
	if err != nil || len(files) == 0 {
		f.Fatalf("no seeds in testdata/fuzz/%s: %v", target, err)
	}
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b))
	}
}

// loadWith loads the configuration with only env set, timed.
func loadWith(t *testing.T, env map[string]string) (Config, error) {
	t.Helper()
	start := time.Now()
	c, err := Load(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if d := time.Since(start); d > perInput {
		t.Fatalf("Load took %s (at most %s)", d, perInput)
	}
	return c, err
}

// checkLoaded: an error, of non-empty lines; or a configuration that validates.
func checkLoaded(t *testing.T, c Config, err error) {
	t.Helper()
	if err != nil {
		for _, l := range strings.Split(err.Error(), "\n") {
			if strings.TrimSpace(l) == "" {
				t.Fatalf("error with an empty line: %q", err)
			}
		}
		return
	}
	if verr := c.Validate(); verr != nil {
		t.Fatalf("loaded configuration does not validate: %v", verr)
	}
}

// FuzzRegistriesFile: a registries file parses to registries, or to an error that
// names it; the configuration that reads it loads and validates, or fails.
func FuzzRegistriesFile(f *testing.F) {
	addSeeds(f, "FuzzRegistriesFile")
	f.Fuzz(func(t *testing.T, content string) {
		start := time.Now()
		regs, err := resolve.ParseRegistries("fuzz.yaml", []byte(content))
		if d := time.Since(start); d > perInput {
			t.Fatalf("ParseRegistries took %s", d)
		}
		if err != nil {
			if !strings.Contains(err.Error(), "fuzz.yaml") {
				t.Fatalf("error does not name the file: %v", err)
			}
		} else {
			table := resolve.NewRegistryTable(regs)
			for _, r := range regs {
				if r.Prefix == "" {
					t.Fatalf("registry without a prefix: %+v", r)
				}
				checkRequirement(t, table, r)
			}
		}
		path := filepath.Join(t.TempDir(), "registries.yaml")
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := loadWith(t, map[string]string{RegistriesConfigEnv: path})
		checkLoaded(t, c, err)
	})
}

// checkRequirement: under an entry of a registries file ParseRegistries accepted,
// the table requires a signature exactly when the entry or a broader one does,
// and never fails closed (an accepted file's requirements compile and merge).
func checkRequirement(t *testing.T, table resolve.RegistryTable, r resolve.RegistryConfig) {
	t.Helper()
	repo, err := name.NewRepository(r.Prefix + "/fuzz")
	if err != nil {
		return
	}
	trust, by := table.RequiredTrust(repo)
	if r.RequireSignature != nil && trust == nil {
		t.Fatalf("entry %s requires %+v; the table requires nothing", r.Prefix, *r.RequireSignature)
	}
	if strings.Contains(by, "invalid") {
		t.Fatalf("accepted entry %s fails closed: %s", r.Prefix, by)
	}
}

// FuzzConfigFile: a configuration file loads to a configuration that validates, or
// to an error; nothing panics, nothing takes long.
func FuzzConfigFile(f *testing.F) {
	addSeeds(f, "FuzzConfigFile")
	f.Fuzz(func(t *testing.T, content string) {
		path := filepath.Join(t.TempDir(), "config.yaml")
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := loadWith(t, map[string]string{ConfigEnv: path})
		checkLoaded(t, c, err)
	})
}

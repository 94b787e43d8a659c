package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFileErrorsAtTheirPlace: every YAML problem of the configuration file, at any
// level, is a *FileError naming the file, the line and column of the problem and,
// for an unknown key, the key it is probably.
func TestFileErrorsAtTheirPlace(t *testing.T) {
	for _, tt := range []struct {
		name, doc string
		want      string
	}{
		{"syntax: indent", "tagTTL: 5m\nregistries:\n  - prefix: ghcr.io\n   insecure: true\n",
			`config c.yaml (line 4, column 4): YAML syntax: did not find expected '-' indicator`},
		{"syntax: unquoted star", "rateLimits:\n  - registry: *\n    rps: 1\n",
			`config c.yaml (line 2, column 15): YAML syntax: did not find expected alphabetic or numeric character (a "*" must be quoted in YAML: registry: "*")`},
		{"top-level key", "headTTL: 1m\ntagTTl: 5m\n", `config c.yaml (line 2, column 1): unknown key "tagTTl"; did you mean "tagTTL"?`},
		{"registries entry key", "registries:\n  - prefix: ghcr.io\n    insecur: true\n", `config c.yaml (line 3, column 5): unknown key "registries[0].insecur"; did you mean "insecure"?`},
		{"requireSignature key", "registries:\n  - prefix: ghcr.io\n    requireSignature: {keys: release}\n",
			`config c.yaml (line 3, column 24): unknown key "registries[0].requireSignature.keys"; did you mean "key"? (accepted: identity, issuer, key)`},
		{"rateLimits key", "rateLimits:\n  - {registry: docker.io, rsp: 2}\n", `(line 2, column 27): unknown key "rateLimits[0].rsp"; did you mean "rps"?`},
		{"redis key", "redis:\n  adress: x:6379\n", `config c.yaml (line 2, column 3): unknown key "redis.adress"; did you mean "address"?`},
		{"trust key", "trust:\n  trustedRot: /r.json\n", `(line 2, column 3): unknown key "trust.trustedRot"; did you mean "trustedRoot"?`},
		{"git credentials key", "git:\n  credentials:\n    - prefix: https://g/\n      passwordFiel: /p\n", `(line 4, column 7): unknown key "git.credentials[0].passwordFiel"; did you mean "passwordFile"?`},
		{"git setting beside the struct keys", "git:\n  maxRepositoryByte: 1GiB\n", `unknown key "git.maxRepositoryByte"; did you mean "maxRepositoryBytes"?`},
		{"dotted key at the top", "redis.address: x:6379\n", `unknown key "redis.address"; write it in its section: redis: {address: ...}`},
		{"through a merge key", "registries:\n  - {prefix: ghcr.io}\n  - {<<: {insecur: true}, prefix: quay.io}\n", `(line 3, column 11): unknown key "registries[1].insecur"; did you mean "insecure"?`},
		{"duplicate key", "tagTTL: 5m\nheadTTL: 1m\ntagTTL: 6m\n", `config c.yaml key tagTTL (line 3, column 1): duplicate key (first at line 1)`},
		{"a number for a string", "registries:\n  - prefix: ghcr.io\n    api: 5000\n", `config c.yaml key registries[0].api (line 3, column 10): is the number 5000 (accepted: a string; quote it: "5000")`},
		{"a string for a bool", "registries:\n  - prefix: ghcr.io\n    insecure: maybe\n", `key registries[0].insecure (line 3, column 15): is the string "maybe" (accepted: true or false)`},
		{"a string for a number", "registries:\n  - prefix: ghcr.io\n    pageSize: many\n", `key registries[0].pageSize (line 3, column 15): is the string "many" (accepted: a whole number)`},
		{"a mapping for a list", "registries:\n  prefix: ghcr.io\n", `key registries (line 2, column 3): is a mapping (accepted: a list of mappings with keys prefix, api,`},
		{"a list for a section", "redis: [a]\n", `key redis (line 1, column 8): is a list (accepted: a mapping with keys address,`},
		{"trust keys a list", "trust:\n  keys: [a]\n", `key trust.keys (line 2, column 9): is a list (accepted: a mapping of key names to PEM files`},
		{"top level a list", "- tagTTL: 5m\n", `config c.yaml (line 1, column 1): is a list (accepted: a mapping with keys socket,`},
		{"two documents", "tagTTL: 5m\n---\nheadTTL: 1m\n", `config c.yaml (line 2): more than one YAML document`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			err := c.ParseFile("c.yaml", []byte(tt.doc))
			var fe *FileError
			if !errors.As(err, &fe) {
				t.Fatalf("ParseFile = %v (%T), want a *FileError", err, err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q\nwant it to contain %q", err, tt.want)
			}
		})
	}
}

// TestFileShapesAccepted: what the checks must let through to the values' own
// parsers: YAML 1.1 booleans, aliases and merge keys, empty values and files, a
// number where a setting (not a struct field) takes it, trust key names.
func TestFileShapesAccepted(t *testing.T) {
	for _, doc := range []string{
		"",
		"# only a comment\n",
		"---\ntagTTL: 5m\n",
		"registries:\n  - prefix: ghcr.io\n    insecure: yes\n    pageSize: 50\n    rateLimit: 0.5\n",
		"registries:\n  - {prefix: ghcr.io, apps: &a [team-*]}\n  - {prefix: quay.io, apps: *a}\n",
		"redis:\n",
		"renderWorkers: 2\nrefreshAhead: 0.1\n",
		"trust:\n  keys: {}\n",
		"defaultPlatforms: [linux/amd64, linux/arm64]\n",
	} {
		c := DefaultConfig()
		if err := c.ParseFile("c.yaml", []byte(doc)); err != nil {
			t.Errorf("ParseFile(%q) = %v", doc, err)
		}
	}
}

// TestRegistriesFileErrors: the registries file (--registries-config) is checked
// the same way, and its source says which file it is.
func TestRegistriesFileErrors(t *testing.T) {
	for _, tt := range []struct{ doc, want string }{
		{"registries:\n  - prefx: ghcr.io\n", `registries config REG (line 2, column 5): unknown key "registries[0].prefx"; did you mean "prefix"?`},
		{"regisries:\n  - prefix: ghcr.io\n", `registries config REG (line 1, column 1): unknown key "regisries"; did you mean "registries"? (accepted: registries)`},
		{"registries:\n - prefix: ghcr.io\n  api: x\n", `registries config REG (line 3, column 3): YAML syntax: did not find expected '-' indicator`},
	} {
		reg := filepath.Join(t.TempDir(), "registries.yaml")
		if err := os.WriteFile(reg, []byte(tt.doc), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Load(func(k string) (string, bool) {
			if k == RegistriesConfigEnv {
				return reg, true
			}
			return "", false
		})
		var fe *FileError
		want := strings.ReplaceAll(tt.want, "REG", reg)
		if !errors.As(err, &fe) || !strings.Contains(err.Error(), want) {
			t.Errorf("Load with %q = %v, want a *FileError containing %q", tt.doc, err, want)
		}
	}
}

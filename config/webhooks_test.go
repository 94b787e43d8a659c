package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWebhooksSection: the webhooks: section and webhookAddr are read, checked
// together, and their secrets read; every refusal names the key and what is
// accepted, never a secret.
func TestWebhooksSection(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	short := filepath.Join(dir, "short")
	os.WriteFile(good, []byte("0123456789abcdef0123\n"), 0o600) //nolint:errcheck
	os.WriteFile(short, []byte("tooshort\n"), 0o600)            //nolint:errcheck
	t.Setenv("HOOK_SECRET", "fedcba9876543210fedc")
	cases := []struct {
		name, file string
		wantErr    string // "" for none
		secrets    map[string]string
	}{
		{"file and env", "webhookAddr: ':8091'\nwebhooks:\n  distribution: {secretFile: " + good + "}\n  github: {secretEnv: HOOK_SECRET, registry: ghcr.io}\n", "",
			map[string]string{"distribution": "0123456789abcdef0123", "github": "fedcba9876543210fedc"}},
		{"unknown kind", "webhookAddr: ':8091'\nwebhooks:\n  artifactory: {secretFile: " + good + "}\n", "kinds distribution, dockerhub", nil},
		{"no secret", "webhookAddr: ':8091'\nwebhooks:\n  quay: {}\n", "one of secretFile", nil},
		{"both secrets", "webhookAddr: ':8091'\nwebhooks:\n  quay: {secretFile: " + good + ", secretEnv: HOOK_SECRET}\n", "one of secretFile", nil},
		{"unknown entry key", "webhookAddr: ':8091'\nwebhooks:\n  quay: {token: x}\n", "token", nil},
		{"bad registry", "webhookAddr: ':8091'\nwebhooks:\n  quay: {secretFile: " + good + ", registry: 'https://quay.io/x'}\n", "webhooks.quay.registry", nil},
		{"webhooks without an address", "webhooks:\n  quay: {secretFile: " + good + "}\n", "webhookAddr", nil},
		{"an address without webhooks", "webhookAddr: ':8091'\n", "at least one kind", nil},
		{"short secret", "webhookAddr: ':8091'\nwebhooks:\n  zot: {secretFile: " + short + "}\n", "at least 16", nil},
		{"missing file", "webhookAddr: ':8091'\nwebhooks:\n  zot: {secretFile: " + filepath.Join(dir, "none") + "}\n", "webhooks.zot.secretFile", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := DefaultConfig()
			err := cfg.ParseFile("test.yaml", []byte(c.file))
			if err == nil {
				err = cfg.Validate()
			}
			var secrets map[string][]byte
			if err == nil {
				secrets, err = cfg.Webhooks.Secrets()
			}
			switch {
			case c.wantErr == "" && err != nil:
				t.Fatalf("error: %v", err)
			case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
				t.Fatalf("error %v, want one containing %q", err, c.wantErr)
			case err != nil && (strings.Contains(err.Error(), "tooshort") || strings.Contains(err.Error(), "0123456789abcdef")):
				t.Fatalf("the error shows a secret: %v", err)
			}
			for kind, want := range c.secrets {
				if string(secrets[kind]) != want {
					t.Errorf("secret of %s: %q, want %q", kind, secrets[kind], want)
				}
			}
		})
	}
}

package signature_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/argocd-image-resolver/argocd-image-resolver/config"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve/signature"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve/signature/signtest"
)

// The operator's files: keys (read by config, as compose does) and trusted root load, and verify; bad files are
// errors naming the setting, the file and what is accepted.
func TestLoadFiles(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	pemKey, err := e.sg.PublicKeyPEM("release")
	if err != nil {
		t.Fatal(err)
	}
	rootJSON, err := e.sg.TrustedRootJSON()
	if err != nil {
		t.Fatal(err)
	}
	keys, err := config.TrustConfig{Keys: map[string]string{"release": write("cosign.pub", pemKey)}}.PublicKeys()
	if err != nil {
		t.Fatal(err)
	}
	tm, err := signature.LoadTrustedRoot(write("trusted_root.json", rootJSON))
	if err != nil {
		t.Fatal(err)
	}
	d := e.push("app", "1.0.0")
	e.sign("app", d, signtest.Referrers, keyless(release))
	e.sign("app", d, signtest.CosignTag, keyed("release"))
	v, err := signature.New(e.reg, signature.WithPublicKeys(keys), signature.WithTrustedMaterial(tm), signature.WithRequireSCT(false))
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range []string{"keyless", "key"} {
		trust := kl(t)
		if tr == "key" {
			trust = kr(t)
		}
		if _, err := v.Verify(context.Background(), subject(e, "app", d, nil), trust); err != nil {
			t.Errorf("%s with loaded files: %v", tr, err)
		}
	}

	bad := []struct {
		name, file, content, want string
	}{
		{"missing", "nope.pub", "", "trust.keys.k: open " + filepath.Join(dir, "nope.pub")},
		{"not PEM", "x.pub", "hello", "x.pub: no PEM block"},
		{"private key", "p.pem", "-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n", `a PEM "EC PRIVATE KEY" block, not PUBLIC KEY`},
	}
	for _, c := range bad {
		p := filepath.Join(dir, c.file)
		if c.content != "" {
			p = write(c.file, []byte(c.content))
		}
		if _, err := (config.TrustConfig{Keys: map[string]string{"k": p}}).PublicKeys(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want %q", c.name, err, c.want)
		}
	}
	p := write("root.json", []byte(`{"mediaType":"nope"}`))
	if _, err := signature.LoadTrustedRoot(p); err == nil || !strings.Contains(err.Error(), "trust.trustedRoot: "+p+": not a Sigstore trusted root") {
		t.Errorf("bad trusted root: %v", err)
	}
}

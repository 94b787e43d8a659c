package migrate

import (
	"testing"
)

// argocd-image-updater's imagesVerification, migrated: the key it names becomes
// verify-key of the same requirement at the same level (all images, or one), the
// plugin reads the migrated parameters to the requirement each image had, and
// what the operator must do (the key under trust.keys) is said; a requirement
// that cannot be carried over leaves its images out rather than resolved
// unchecked.
func TestSignatureVerification(t *testing.T) {
	const file = "signature-verification.yaml"
	res := migrateFile(t, file)
	trusts := map[string]map[string]string{} // app -> alias -> requirement
	for _, a := range migratedApps(t, res.Manifests) {
		pol, err := pluginPolicy(t, a)
		if err != nil {
			t.Fatalf("%s: %v", a.name, err)
		}
		trusts[a.name] = map[string]string{}
		for _, ip := range pol.Images {
			trusts[a.name][ip.Alias] = "none"
			if tr := ip.Policy.Trust(); tr != nil {
				trusts[a.name][ip.Alias] = tr.Describe()
			}
		}
	}
	want := map[string]map[string]string{
		"shop":        {"web": "key org-cosign-pubkey", "api": "key team-keys.api", "nginx": "none"},
		"shop-legacy": {},
		"shop-broken": {},
	}
	for app, aliases := range want {
		if len(trusts[app]) != len(aliases) {
			t.Errorf("%s: images %v, want %v", app, trusts[app], aliases)
		}
		for alias, w := range aliases {
			if got := trusts[app][alias]; got != w {
				t.Errorf("%s %s: requirement %q, want %q", app, alias, got, w)
			}
		}
	}

	tests := []struct {
		object string
		kind   Kind
		parts  []string
	}{
		{"Application argocd/shop", Differs, []string{"spec.imagesVerification", `verify-key "org-cosign-pubkey"`, "trust: {keys: {org-cosign-pubkey: /path/to/cosign.pub}}", "not from Secrets"}},
		{"Application argocd/shop", Differs, []string{"images[1].imagesVerification", `verify-key "team-keys.api"`, `field "api.pub" of Secret team-keys`}},
		{"Application argocd/shop", Differs, []string{"checked the signature of the one tag it picked", "newest signed one"}},
		{"Application argocd/shop", Note, []string{"images[2].imagesVerification: enabled: false: no signature is required"}},
		{"Application argocd/shop-legacy", Lost, []string{"applicationRefs[1].imagesVerification.cosignKeyless: unknown to migrate"}},
		{"Application argocd/shop-broken", Lost, []string{"applicationRefs[2].imagesVerification: names no cosignKey.secretName"}},
		{"Application argocd/shop-broken", Lost, []string{`image "web" (ghcr.io/org/web) is left out of image-list: its signature requirement`, "never resolved without it"}},
	}
	for _, tt := range tests {
		if got := findings(res, tt.object, tt.kind); !hasFinding(got, tt.parts...) {
			t.Errorf("%s: no %s finding with %q among %q", tt.object, tt.kind, tt.parts, got)
		}
	}
	// The behaviour note is said once per app, not once per key.
	n := 0
	for _, f := range findings(res, "Application argocd/shop", Differs) {
		if hasFinding([]string{f}, "the one tag it picked") {
			n++
		}
	}
	if n != 1 {
		t.Errorf("the behaviour note is said %d times", n)
	}
}

func TestTrustKeyName(t *testing.T) {
	for _, tc := range []struct{ secret, key, want string }{
		{"org-cosign-pubkey", "cosign.pub", "org-cosign-pubkey"},
		{"team-keys", "api.pub", "team-keys.api"},
		{"keys", "release key", "keys.release-key"},
		{"-x", "cosign.pub", "k-x"},
		{"a.very-long-secret-name-that-kubernetes-allows-but-a-key-name-does-not", "cosign.pub", "a.very-long-secret-name-that-kubernetes-allows-but-a-key-name-d"},
	} {
		if got := trustKeyName(tc.secret, tc.key); got != tc.want {
			t.Errorf("trustKeyName(%q, %q) = %q, want %q", tc.secret, tc.key, got, tc.want)
		}
	}
}

package plugin

import (
	"errors"
	"strings"
	"testing"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

const (
	ghIssuer   = "https://token.actions.githubusercontent.com"
	ghIdentity = "regexp:^https://github.com/org/web/.github/workflows/release.yml@refs/tags/"
)

// The verify keys fill the image's PolicySpec.Verify and its compiled trust, from
// parameters (per alias, application-wide) and the policy file, layered as the
// other keys are; a key replaces a keyless identity of a less specific layer and
// the other way round.
func TestLoadPolicyVerify(t *testing.T) {
	cases := []struct {
		name     string
		file     string
		params   Parameters
		want     resolve.VerifySpec
		describe string            // Policy.Trust().Describe(); "" for no trust
		source   map[string]string // ImagePolicy.Source of the verify keys
	}{
		{name: "per-alias keyless", params: Parameters{ps("image-list", "web=ghcr.io/org/web"), ps("web.verify-identity", ghIdentity), ps("web.verify-issuer", ghIssuer)},
			want:     resolve.VerifySpec{Identity: ghIdentity, Issuer: ghIssuer},
			describe: "identity " + ghIdentity + " (issuer " + ghIssuer + ")",
			source:   map[string]string{"verify.identity": `parameter "web.verify-identity"`, "verify.issuer": `parameter "web.verify-issuer"`}},
		{name: "per-alias key", params: Parameters{ps("image-list", "web=ghcr.io/org/web"), ps("web.verify-key", "release")},
			want: resolve.VerifySpec{Key: "release"}, describe: "key release",
			source: map[string]string{"verify.key": `parameter "web.verify-key"`}},
		{name: "application-wide issuer, per-alias identity", params: Parameters{ps("image-list", "web=ghcr.io/org/web"), ps("verify-issuer", ghIssuer), ps("web.verify-identity", ghIdentity)},
			want:     resolve.VerifySpec{Identity: ghIdentity, Issuer: ghIssuer},
			describe: "identity " + ghIdentity + " (issuer " + ghIssuer + ")",
			source:   map[string]string{"verify.identity": `parameter "web.verify-identity"`, "verify.issuer": `parameter "verify-issuer" (all images)`}},
		{name: "application-wide keyless, per-alias key replaces it", params: Parameters{ps("image-list", "web=ghcr.io/org/web"), ps("verify-identity", ghIdentity), ps("verify-issuer", ghIssuer), ps("web.verify-key", "release")},
			want: resolve.VerifySpec{Key: "release"}, describe: "key release",
			source: map[string]string{"verify.key": `parameter "web.verify-key"`}},
		{name: "file key, parameters keyless replace it",
			file:     "images:\n  web:\n    image: ghcr.io/org/web\n    verify: {key: release}\n",
			params:   Parameters{ps("web.verify-identity", "https://github.com/org/web/.github/workflows/release.yml@refs/heads/main"), ps("verify-issuer", ghIssuer)},
			want:     resolve.VerifySpec{Identity: "https://github.com/org/web/.github/workflows/release.yml@refs/heads/main", Issuer: ghIssuer},
			describe: "identity https://github.com/org/web/.github/workflows/release.yml@refs/heads/main (issuer " + ghIssuer + ")",
			source:   map[string]string{"verify.identity": `parameter "web.verify-identity"`, "verify.issuer": `parameter "verify-issuer" (all images)`}},
		{name: "file keyless",
			file:     "images:\n  web:\n    image: ghcr.io/org/web\n    verify:\n      identity: '" + ghIdentity + "'\n      issuer: " + ghIssuer + "\n",
			want:     resolve.VerifySpec{Identity: ghIdentity, Issuer: ghIssuer},
			describe: "identity " + ghIdentity + " (issuer " + ghIssuer + ")",
			source: map[string]string{"verify.identity": "file .argocd-image-resolver.yaml key images.web.verify.identity",
				"verify.issuer": "file .argocd-image-resolver.yaml key images.web.verify.issuer"}},
		{name: "application-wide key beats nothing in the file", file: "images:\n  web:\n    image: ghcr.io/org/web\n    verify: {}\n",
			params: Parameters{ps("verify-key", "release")},
			want:   resolve.VerifySpec{Key: "release"}, describe: "key release",
			source: map[string]string{"verify.key": `parameter "verify-key" (all images)`}},
		{name: "an alias clears the application-wide requirement with empty values", params: Parameters{ps("image-list", "web=ghcr.io/org/web"), ps("verify-identity", ghIdentity), ps("verify-issuer", ghIssuer), ps("web.verify-identity", ""), ps("web.verify-issuer", " ")},
			want:   resolve.VerifySpec{Issuer: " "},
			source: map[string]string{"verify.identity": `parameter "web.verify-identity"`, "verify.issuer": `parameter "web.verify-issuer"`}},
		{name: "no verify keys, no trust", params: Parameters{ps("image-list", "web=ghcr.io/org/web")}, source: map[string]string{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pol, err := LoadPolicy(appDir(t, tc.file), tc.params)
			if err != nil {
				t.Fatal(err)
			}
			web := img(t, pol, "web")
			if web.Spec.Verify != tc.want {
				t.Errorf("Verify %+v, want %+v", web.Spec.Verify, tc.want)
			}
			got := ""
			if tr := web.Policy.Trust(); tr != nil {
				got = tr.Describe()
			}
			if got != tc.describe {
				t.Errorf("trust %q, want %q", got, tc.describe)
			}
			for _, k := range []string{SourceVerifyIdentity, SourceVerifyIssuer, SourceVerifyKey} {
				if web.Source[k] != tc.source[k] {
					t.Errorf("Source[%s] = %q, want %q", k, web.Source[k], tc.source[k])
				}
			}
		})
	}
}

// Bad verify values are errors naming the user's spelling (parameter, file key),
// the value and what is accepted; a missing half of a keyless requirement names
// where it goes; key material is refused without being repeated.
func TestLoadPolicyVerifyErrors(t *testing.T) {
	const pem = "-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\nZXlKcmFXUWlPbnNpYm1GdFpTSTZJbk5qY25sd2RDSXNJbkJoY21GdGN5STZleUp1SWpvek1qYzJPQ3dpY2lJNk9Dd2ljQ0k2TVgxOUxDSnpZV3gwSWpvaU5tSm1ZVEE0\n-----END ENCRYPTED SIGSTORE PRIVATE KEY-----\n"
	cases := []struct {
		name    string
		file    string
		params  Parameters
		want    []string
		notWant string
	}{
		{name: "identity without issuer", params: Parameters{ps("image-list", "web=nginx"), ps("web.verify-identity", ghIdentity)},
			want: []string{`parameter "web.verify-issuer" (not given; needed with parameter "web.verify-identity"): invalid value "": verify-identity "` + ghIdentity + `" needs its OIDC issuer`, "accepted: the OIDC issuer"}},
		{name: "application-wide issuer without identity", params: Parameters{ps("image-list", "web=nginx"), ps("verify-issuer", ghIssuer)},
			want: []string{`parameter "verify-identity" (all images) (not given; needed with parameter "verify-issuer" (all images)): invalid value "": verify-issuer "` + ghIssuer + `" needs the identity it issued`}},
		{name: "file identity without issuer", file: "images:\n  web:\n    image: nginx\n    verify:\n      identity: https://github.com/org/web/.github/workflows/release.yml@refs/heads/main\n",
			want: []string{`file .argocd-image-resolver.yaml key images.web.verify.issuer (not given; needed with file .argocd-image-resolver.yaml key images.web.verify.identity (line 5))`}},
		{name: "key and identity in one layer", params: Parameters{ps("image-list", "web=nginx"), ps("web.verify-identity", "x"), ps("web.verify-issuer", ghIssuer), ps("web.verify-key", "release")},
			want: []string{`parameter "web.verify-identity": invalid value "x": verify-key "release" is set too; a policy names a key or a keyless identity, not both`}},
		{name: "key and identity in the file", file: "images:\n  web:\n    image: nginx\n    verify: {key: release, identity: x, issuer: y}\n",
			want: []string{`file .argocd-image-resolver.yaml key images.web.verify.identity (line 4): invalid value "x": verify-key "release" is set too`}},
		{name: "bad identity regexp", params: Parameters{ps("image-list", "web=nginx"), ps("web.verify-identity", "regexp:("), ps("web.verify-issuer", ghIssuer)},
			want: []string{`parameter "web.verify-identity": invalid value "regexp:(": error parsing regexp`, "accepted: the signer's certificate identity"}},
		{name: "bad application-wide issuer regexp, overridden, still reported", params: Parameters{ps("image-list", "web=nginx"), ps("verify-issuer", "regexp:["), ps("web.verify-issuer", ghIssuer), ps("web.verify-identity", "x")},
			want: []string{`parameter "verify-issuer" (all images): invalid value "regexp:[": error parsing regexp`}},
		{name: "bad key name", params: Parameters{ps("image-list", "web=nginx"), ps("web.verify-key", "my key")},
			want: []string{`parameter "web.verify-key": invalid value "my key" (accepted: the name of a public key in the operator's trust.keys`}},
		{name: "key material is refused, not shown", params: Parameters{ps("image-list", "web=nginx"), ps("web.verify-key", pem)},
			want:    []string{`parameter "web.verify-key": invalid value "(not shown)"`, "look like key material, not a key name", "trust.keys"},
			notWant: "ZXlK"},
		{name: "verify as an array", params: Parameters{ps("image-list", "web=nginx"), pa("web.verify-key", "release")},
			want: []string{`parameter "web.verify-key": is an array, expected a string (accepted: the name of a public key`}},
		{name: "file verify a string", file: "images:\n  web:\n    image: nginx\n    verify: release\n",
			want: []string{`file .argocd-image-resolver.yaml key images.web.verify (line 4): is the scalar "release" (accepted: a mapping with keys identity, issuer, key)`}},
		{name: "file verify unknown key", file: "images:\n  web:\n    image: nginx\n    verify: {identiy: x}\n",
			want: []string{`key images.web.verify.identiy (line 4): unknown key; did you mean "identity"? (accepted: identity, issuer, key)`}},
		{name: "file verify value a list", file: "images:\n  web:\n    image: nginx\n    verify: {key: [a]}\n",
			want: []string{`key images.web.verify.key (line 4): is a list (accepted: a string)`}},
		{name: "unknown verify key", params: Parameters{ps("image-list", "web=nginx"), ps("web.verify-isuer", "x")},
			want: []string{`parameter "web.verify-isuer": unknown key "verify-isuer"; did you mean "verify-issuer"?`}},
		{name: "same repository, different signers", params: Parameters{ps("image-list", "a=nginx, b=docker.io/library/nginx"), ps("a.verify-key", "one"), ps("b.verify-key", "two")},
			want: []string{`aliases "a" (parameter "image-list") and "b" (parameter "image-list") both name repository docker.io/library/nginx with different policies`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadPolicy(appDir(t, tc.file), tc.params)
			assertErr(t, err, tc.want...)
			if tc.notWant != "" && strings.Contains(err.Error(), tc.notWant) {
				t.Errorf("error repeats key material: %v", err)
			}
		})
	}
}

func TestRefuseKeyMaterial(t *testing.T) {
	for _, v := range []string{"release", "team.release-2024_v1", strings.Repeat("k", 63), ""} {
		if err := RefuseKeyMaterial("--verify-key", v); err != nil {
			t.Errorf("%q: %v", v, err)
		}
	}
	for _, v := range []string{"-----BEGIN PUBLIC KEY-----", "a\nb", strings.Repeat("A", 65)} {
		err := RefuseKeyMaterial("--verify-key", v)
		var ie *resolve.InputError
		if !errors.As(err, &ie) || ie.Policy != resolve.FieldVerifyKey || strings.Contains(err.Error(), v) ||
			!strings.HasPrefix(err.Error(), `--verify-key: invalid value "(not shown)"`) {
			t.Errorf("%q: %v", v, err)
		}
	}
}

package resolve_test

import (
	"strings"
	"testing"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

func TestPlatformSatisfies(t *testing.T) {
	tests := []struct {
		have, req string
		want      bool
	}{
		// A required platform without a variant accepts every variant.
		{"linux/arm64", "linux/arm64", true},
		{"linux/arm64/v9", "linux/arm64", true},
		{"linux/arm/v7", "linux/arm", true},
		{"linux/arm/v6", "linux/arm", true},
		// A required variant is matched exactly; an image naming no variant has its
		// architecture's default (arm64 v8, amd64 v1; 32-bit arm has none).
		{"linux/arm64", "linux/arm64/v8", true},
		{"linux/arm64/v8", "linux/arm64/v8", true},
		{"linux/arm64/v9", "linux/arm64/v8", false},
		{"linux/arm64/v8.2", "linux/arm64/v8", false},
		{"linux/arm64", "linux/arm64/v9", false},
		{"linux/arm/v7", "linux/arm/v7", true},
		{"linux/arm/v6", "linux/arm/v7", false},
		{"linux/arm", "linux/arm/v7", false},
		{"linux/amd64", "linux/amd64/v1", true},
		{"linux/amd64/v3", "linux/amd64/v1", false},
		{"linux/amd64/v3", "linux/amd64", true},
		// Architecture aliases.
		{"linux/aarch64", "linux/arm64/v8", true},
		{"linux/x86_64", "linux/amd64", true},
		// Other OS or architecture.
		{"windows/amd64", "linux/amd64", false},
		{"linux/arm64", "linux/arm", false},
	}
	for _, tt := range tests {
		// What an image has is normalised as the registry client does it.
		rp, err := rt.ParsePlatform(tt.have)
		if err != nil {
			t.Fatal(err)
		}
		have := resolve.PlatformOf(rp)
		req, err := resolve.ParsePlatform(tt.req)
		if err != nil {
			t.Fatal(err)
		}
		if got := have.Satisfies(req); got != tt.want {
			t.Errorf("%s satisfies %s = %t, want %t", tt.have, tt.req, got, tt.want)
		}
	}
}

func TestParsePlatformKeepsRequiredVariant(t *testing.T) {
	tests := []struct{ in, want string }{
		{"linux/arm64", "linux/arm64"},
		{"linux/arm64/v8", "linux/arm64/v8"},
		{"linux/aarch64", "linux/arm64"},
		{"linux/x86_64", "linux/amd64"},
		{"linux/arm/v7", "linux/arm/v7"},
	}
	for _, tt := range tests {
		p, err := resolve.ParsePlatform(tt.in)
		if err != nil {
			t.Fatalf("ParsePlatform(%q): %v", tt.in, err)
		}
		if p.String() != tt.want {
			t.Errorf("ParsePlatform(%q) = %s, want %s", tt.in, p, tt.want)
		}
		var back resolve.Platform
		if err := back.UnmarshalText([]byte(p.String())); err != nil || back != p {
			t.Errorf("%s does not round-trip: %v, %v", p, back, err)
		}
	}
	ps, err := resolve.ParsePlatforms("linux/arm64/v8, linux/amd64", "linux/amd64")
	if err != nil {
		t.Fatal(err)
	}
	if got := resolve.PlatformStrings(ps); len(got) != 2 || got[0] != "linux/amd64" || got[1] != "linux/arm64/v8" {
		t.Errorf("ParsePlatforms = %v, want [linux/amd64 linux/arm64/v8]", got)
	}
}

// A v8 requirement against a registry: an image that has only another arm64
// variant does not qualify, and the skip says what it has.
func TestArm64VariantRequirementOverHTTP(t *testing.T) {
	s := rt.New(t)
	s.PushIndex(t, "app", "2.0.0", rt.Index(day(2), []string{"linux/amd64", "linux/arm64/v9"}))
	s.PushIndex(t, "app", "1.0.0", rt.Index(day(1), []string{"linux/amd64", "linux/arm64/v8"}))
	s.Push(t, "single", "2.0.0", rt.Image(day(2), "linux/arm64/v9"))
	s.Push(t, "single", "1.0.0", rt.Image(day(1), "linux/arm64"))
	r := newResolver(t)
	for _, repo := range []string{"app", "single"} {
		res := mustResolve(t, r, s, repo, resolve.PolicySpec{Platforms: []string{"linux/arm64/v8"}})
		if res.Tag != "1.0.0" {
			t.Errorf("%s, linux/arm64/v8: tag %q, want 1.0.0 (2.0.0 has only arm64/v9)", repo, res.Tag)
		}
		if len(res.Skipped) != 1 || res.Skipped[0].Tag != "2.0.0" || len(res.Skipped[0].Missing) != 1 || res.Skipped[0].Missing[0] != "linux/arm64/v8" {
			t.Errorf("%s: skipped = %+v, want 2.0.0 missing linux/arm64/v8", repo, res.Skipped)
		}
		if res := mustResolve(t, r, s, repo, resolve.PolicySpec{Platforms: []string{"linux/arm64"}}); res.Tag != "2.0.0" {
			t.Errorf("%s, linux/arm64 (any variant): tag %q, want 2.0.0", repo, res.Tag)
		}
	}
}

// A misspelt operating system or architecture is bad input naming what is
// accepted, not a requirement no image meets.
func TestParsePlatformUnknownNames(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"linux/amd65", "an architecture Go and OCI images name"},
		{"linx/amd64", "an operating system Go and OCI images name"},
		{"linux/arm65/v8", "an architecture Go and OCI images name"},
	} {
		_, err := resolve.ParsePlatform(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.in) {
			t.Errorf("ParsePlatform(%q) = %v, want an error naming the value and %q", tc.in, err, tc.want)
		}
	}
	for _, ok := range []string{"linux/amd64", "linux/x86_64", "linux/aarch64", "windows/amd64", "linux/s390x", "linux/riscv64", "linux/arm/v7"} {
		if _, err := resolve.ParsePlatform(ok); err != nil {
			t.Errorf("ParsePlatform(%q): %v", ok, err)
		}
	}
}

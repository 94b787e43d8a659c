package resolve

import (
	"errors"
	"testing"
)

func TestParseImage(t *testing.T) {
	const dgst = "sha256:0123456789012345678901234567890123456789012345678901234567890123"
	tests := []struct {
		in, key, written, tag, digest string
	}{
		{"nginx", "docker.io/library/nginx", "nginx", "", ""},
		{"nginx:1.25", "docker.io/library/nginx", "nginx", "1.25", ""},
		{"docker.io/library/nginx:1.25", "docker.io/library/nginx", "docker.io/library/nginx", "1.25", ""},
		{"index.docker.io/bitnami/redis", "docker.io/bitnami/redis", "index.docker.io/bitnami/redis", "", ""},
		{"registry-1.docker.io/bitnami/redis", "docker.io/bitnami/redis", "registry-1.docker.io/bitnami/redis", "", ""},
		{"localhost:5000/team/app:v1", "localhost:5000/team/app", "localhost:5000/team/app", "v1", ""},
		{"ghcr.io/org/app@" + dgst, "ghcr.io/org/app", "ghcr.io/org/app", "", dgst},
		{"ghcr.io/org/app:1.0@" + dgst, "ghcr.io/org/app", "ghcr.io/org/app", "1.0", dgst},
	}
	for _, tt := range tests {
		img, err := ParseImage(tt.in)
		if err != nil {
			t.Errorf("ParseImage(%q): %v", tt.in, err)
			continue
		}
		if img.Key() != tt.key || img.Written != tt.written || img.Tag != tt.tag || img.Digest != tt.digest {
			t.Errorf("ParseImage(%q) = key %q written %q tag %q digest %q", tt.in, img.Key(), img.Written, img.Tag, img.Digest)
		}
		if img.String() != tt.in {
			t.Errorf("String() = %q, want %q", img.String(), tt.in)
		}
	}
	for _, bad := range []string{"", " nginx", "UPPER/case", "nginx:bad tag", "nginx@sha256:short", "a//b"} {
		var ie *InputError
		if _, err := ParseImage(bad); !errors.As(err, &ie) {
			t.Errorf("ParseImage(%q) error = %v, want *InputError", bad, err)
		}
	}
}

func TestParseImageSpec(t *testing.T) {
	tests := []struct{ in, written, constraint string }{
		{"ghcr.io/org/app", "ghcr.io/org/app", ""},
		{"ghcr.io/org/app:~1.2", "ghcr.io/org/app", "~1.2"},
		{"localhost:5000/app:>=1.0 <2", "localhost:5000/app", ">=1.0 <2"},
		{"nginx:1.x", "nginx", "1.x"},
	}
	for _, tt := range tests {
		_, written, c, err := ParseImageSpec(tt.in)
		if err != nil || written != tt.written || c != tt.constraint {
			t.Errorf("ParseImageSpec(%q) = %q, %q, %v", tt.in, written, c, err)
		}
	}
	if _, _, _, err := ParseImageSpec("app@sha256:abc"); err == nil {
		t.Error("digest in an image-list entry accepted")
	}
}

func TestPlatforms(t *testing.T) {
	ps, err := ParsePlatforms("linux/arm64/v8, linux/amd64", "linux/arm64")
	if err != nil {
		t.Fatal(err)
	}
	if got := joinPlatforms(ps); got != "linux/amd64,linux/arm64,linux/arm64/v8" {
		t.Errorf("ParsePlatforms = %s, want linux/amd64,linux/arm64,linux/arm64/v8 (a required variant is kept, sorted, unique)", got)
	}
	arm7, _ := ParsePlatform("linux/arm/v7")
	arm, _ := ParsePlatform("linux/arm")
	if !arm7.Satisfies(arm) || arm.Satisfies(arm7) {
		t.Error("linux/arm must accept linux/arm/v7, and linux/arm/v7 must not accept an unknown variant")
	}
	if m := missingPlatforms(ps[1:2], ps); len(m) != 1 || m[0].Arch != "amd64" {
		t.Errorf("missingPlatforms = %v", m)
	}
}

func FuzzParseImage(f *testing.F) {
	for _, s := range []string{"nginx", "localhost:5000/a/b:c@sha256:0123456789012345678901234567890123456789012345678901234567890123", "a:~1.2", ":", "@", "a/b:"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if img, err := ParseImage(s); err == nil && img.String() != s {
			t.Fatalf("ParseImage(%q).String() = %q", s, img.String())
		}
		_, _, _, _ = ParseImageSpec(s)
		_, _ = ParsePlatforms(s)
	})
}

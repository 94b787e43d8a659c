package pin

import (
	"strings"
	"testing"
)

func TestShortRef(t *testing.T) {
	for in, want := range map[string]string{
		"ghcr.io/org/web:1.2.3":                             "1.2.3",
		"localhost:5000/web:1.2.3":                          "1.2.3",
		"localhost:5000/web":                                "localhost:5000/web",
		"ghcr.io/org/web:1.2.3@sha256:0123456789abcdef0123": "1.2.3@sha256:0123456789ab",
		"ghcr.io/org/web@sha256:0123456789abcdef0123":       "@sha256:0123456789ab",
	} {
		if got := shortRef(in); got != want {
			t.Errorf("shortRef(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestDefaultMessage(t *testing.T) {
	one := []appliedPin{{App: "shop", File: "apps/shop/.argocd-image-resolver.pins.yaml",
		Pin: Pin{Alias: "web", Image: "ghcr.io/org/web", Reference: "ghcr.io/org/web:1.3.0", Tag: "1.3.0"}}}
	got := DefaultMessage(messageData("https://git.example.com/apps.git", "main", one))
	want := "argocd-image-resolver: pin web 1.3.0 (shop)\n\n- shop web: (no pin) -> ghcr.io/org/web:1.3.0\n  file: apps/shop/.argocd-image-resolver.pins.yaml\n"
	if got != want {
		t.Errorf("new pin:\n%s\nwant:\n%s", got, want)
	}
	two := append(one, appliedPin{App: "shop", File: "apps/shop/values.yaml", Old: "ghcr.io/org/api:1", Pin: Pin{Alias: "api", Reference: "ghcr.io/org/api:2"}})
	if got := DefaultMessage(messageData("", "main", two)); !strings.HasPrefix(got, "argocd-image-resolver: pin 2 images of shop\n\n") {
		t.Errorf("one app:\n%s", got)
	}
}

func TestCheckMessage(t *testing.T) {
	if err := CheckMessage("{{len .Changes}} pins for {{join .Apps}}"); err == nil || !strings.Contains(err.Error(), "text/template") {
		t.Errorf("unknown function: %v", err)
	}
	if err := CheckMessage("{{/* nothing */}}  "); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Errorf("empty message: %v", err)
	}
	if err := CheckMessage("pin {{range .Changes}}{{.Alias}}:{{.Tag}} {{end}}"); err != nil {
		t.Error(err)
	}
}

package webhook

import (
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// FuzzParsers feeds every kind's parser arbitrary bodies: none may panic, and
// every push one returns must be a valid, normalised reference.
func FuzzParsers(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "webhooks", "*.json"))
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"events":[{"action":"push","target":{"mediaType":"` + ignoredManifest + `","repository":"a","tag":"sha256:x"}}]}`))
	headers := []http.Header{
		hdr("X-GitHub-Event", "package", "X-Gitea-Event", "package", "Ce-Specversion", "1.0", "Ce-Id", "i", "Ce-Type", zotImageUpdated),
		hdr("X-GitHub-Event", "registry_package", "Content-Type", "application/cloudevents+json"),
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, kind := range Kinds() {
			for _, h := range headers {
				items, err := kinds[kind].parse(h, body)
				if err != nil {
					continue
				}
				if len(items) == 0 {
					t.Fatalf("%s: no error and no events", kind)
				}
				for _, it := range items {
					if it.push {
						checkNormalised(t, kind, it.ev)
					}
				}
			}
		}
	})
}

func checkNormalised(t *testing.T, kind string, ev Event) {
	t.Helper()
	again, err := newEvent(ev.Registry, ev.Repository, ev.Tag, ev.Digest)
	if err != nil || again != ev {
		t.Fatalf("%s: push %+v is not normalised: %+v, %v", kind, ev, again, err)
	}
	if ev.Repository == "" || slices.Contains([]string{"index.docker.io", "registry-1.docker.io"}, ev.Registry) {
		t.Fatalf("%s: push %+v", kind, ev)
	}
}

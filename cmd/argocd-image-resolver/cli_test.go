package main

import (
	"encoding/json"
	"runtime"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

const (
	testVersion = "v0.0.0-test"
	testCommit  = "0123456789abcdef"
)

func TestVersion(t *testing.T) {
	text := runIn(t, ".", nil, binary, "version")
	want := "argocd-image-resolver " + testVersion + " (commit " + testCommit + ", " + runtime.Version() + ", " + runtime.GOOS + "/" + runtime.GOARCH + ")\n"
	if text.code != 0 || text.stdout != want {
		t.Errorf("version: exit %d, %q, want %q", text.code, text.stdout, want)
	}
	if flag := runIn(t, ".", nil, binary, "--version"); flag.stdout != want {
		t.Errorf("--version: %q, want %q", flag.stdout, want)
	}
	// plugin.yaml's generate command, stamped by the same ldflags, says the same.
	thinWant := strings.Replace(want, "argocd-image-resolver ", "argocd-image-resolver-generate ", 1)
	if thin := runIn(t, ".", nil, thinBinary, "--version"); thin.code != 0 || thin.stdout != thinWant {
		t.Errorf("argocd-image-resolver-generate --version: exit %d, %q, want %q", thin.code, thin.stdout, thinWant)
	}
	for _, format := range []string{"json", "yaml"} {
		r := runIn(t, ".", nil, binary, "version", "-o", format)
		var v versionInfo
		var err error
		if format == "json" {
			err = json.Unmarshal([]byte(r.stdout), &v)
		} else {
			err = yaml.Unmarshal([]byte(r.stdout), &v)
		}
		if err != nil || v.Version != testVersion || v.Commit != testCommit || v.GoVersion != runtime.Version() {
			t.Errorf("version -o %s: %+v, %v (%q)", format, v, err, r.stdout)
		}
	}
	if bad := runIn(t, ".", nil, binary, "version", "-o", "table"); bad.code != exitInput || !strings.Contains(bad.stderr, "text, json, yaml") {
		t.Errorf("version -o table: exit %d, %q", bad.code, bad.stderr)
	}
}

// Every command's help says which environment it reads and how it exits; aliases
// are hidden; durations and sizes are typed flags.
func TestHelp(t *testing.T) {
	for _, tc := range []struct {
		command []string
		want    []string
		notWant []string
	}{
		{[]string{"resolve"}, []string{"Exit status", "IMAGE_RESOLVER_CONFIG", "IMAGE_RESOLVER_REGISTRIES_CONFIG", "--strategy", "-o, --output",
			"--verify-identity string", "--verify-issuer string", "--verify-key string"},
			[]string{"--update-strategy", "--semver-constraint"}},
		{[]string{"generate"}, []string{"Exit status", "IMAGE_RESOLVER_CONFIG", "ARGOCD_APP_", "argocd-image-resolver-generate"}, nil},
		{[]string{"preview"}, []string{"Exit status", "IMAGE_RESOLVER_CONFIG", "IMAGE_RESOLVER_SOCKET", "-o, --output", "json (the table's data)"}, nil},
		{[]string{"parameters"}, []string{"Exit status"}, nil},
		{[]string{"serve"}, []string{"Exit status", "IMAGE_RESOLVER_TAG_TTL", "--tag-ttl duration", "--manifest-cache-size bytes",
			"--registry-concurrency int", "IMAGE_RESOLVER_DEFAULT_PLATFORMS"}, nil},
		{[]string{"sidecar"}, []string{"Exit status", "IMAGE_RESOLVER_CONFIG", "--tag-ttl duration"}, nil},
		{[]string{"version"}, []string{"Exit status"}, nil},
		{[]string{"migrate"}, []string{"Exit status", "--check", "--registries-out", "not carried over"}, nil},
	} {
		r := runIn(t, ".", nil, binary, append(tc.command, "--help")...)
		for _, w := range tc.want {
			if !strings.Contains(r.stdout, w) {
				t.Errorf("%s --help lacks %q", tc.command[0], w)
			}
		}
		for _, w := range tc.notWant {
			if strings.Contains(r.stdout, w) {
				t.Errorf("%s --help lists the hidden alias %q", tc.command[0], w)
			}
		}
	}
}

func TestUsageErrorsExit2(t *testing.T) {
	for _, args := range [][]string{
		{"serve", "--tag-ttl", "2 minutes"},
		{"resolve"},
		{"resolve", "nginx", "--no-such-flag"},
		{"no-such-command"},
		{"resolve", "nginx", "--update-strategy", "fastest"}, // the hidden alias still works, and checks
	} {
		r := runIn(t, ".", nil, binary, args...)
		if r.code != exitInput {
			t.Errorf("%q: exit %d, want %d; stderr %q", args, r.code, exitInput, r.stderr)
		}
	}
}

// preview prints the same resolution as text, JSON or the manifests; it uses the
// operator's configuration and says nothing about a daemon unless a socket is
// asked for.
func TestPreview(t *testing.T) {
	_, cfg := demoRegistry(t)
	dir := "../../testdata/apps/plain-cron"
	env := map[string]string{"IMAGE_RESOLVER_REGISTRIES_CONFIG": cfg}
	web := "registry.demo.local/demo/web"

	text := runIn(t, dir, env, binary, "preview", ".")
	if text.code != 0 || !strings.Contains(text.stdout, "ALIAS") || !strings.Contains(text.stdout, web+":1.2.0") {
		t.Fatalf("preview: exit %d, stderr %q, stdout:\n%s", text.code, text.stderr, text.stdout)
	}
	if strings.Contains(text.stderr, "daemon") {
		t.Errorf("preview without a socket mentions a daemon: %q", text.stderr)
	}
	if table := runIn(t, dir, env, binary, "preview", ".", "-o", "table"); table.stdout != text.stdout {
		t.Errorf("-o table (the old name) differs from -o text")
	}

	js := runIn(t, dir, env, binary, "preview", ".", "-o", "json")
	var view struct {
		Source string `json:"source"`
		Images []struct {
			Alias, Object, Resolved string
		} `json:"images"`
	}
	if err := json.Unmarshal([]byte(js.stdout), &view); err != nil || js.code != 0 || len(view.Images) != 3 {
		t.Fatalf("preview -o json: exit %d, %v, %+v", js.code, err, view)
	}
	for _, im := range view.Images {
		if !strings.Contains(text.stdout, im.Resolved) || !strings.Contains(text.stdout, im.Object) {
			t.Errorf("json image %+v is not in the table", im)
		}
	}

	manifests := runIn(t, dir, env, binary, "preview", ".", "-o", "yaml")
	gen := generate(t, dir, map[string]string{"IMAGE_RESOLVER_REGISTRIES_CONFIG": cfg, "ARGOCD_APP_NAME": "preview",
		"ARGOCD_APP_NAMESPACE": "default"})
	if manifests.code != 0 || manifests.stdout != gen.stdout {
		t.Errorf("preview -o yaml differs from generate's manifests:\n%s\n---\n%s", manifests.stdout, gen.stdout)
	}

	// A socket asked for and unreachable: one line, then the same answer.
	viaSocket := runIn(t, dir, env, binary, "preview", ".", "--socket", "/nonexistent/d.sock")
	if viaSocket.code != 0 || viaSocket.stdout != text.stdout || !strings.Contains(viaSocket.stderr, "daemon unreachable") || strings.Count(viaSocket.stderr, "\n") != 1 {
		t.Errorf("preview --socket (down): exit %d, stderr %q", viaSocket.code, viaSocket.stderr)
	}
	if bad := runIn(t, dir, env, binary, "preview", ".", "-o", "wide"); bad.code != exitInput || !strings.Contains(bad.stderr, `--output: invalid value "wide"`) {
		t.Errorf("preview -o wide: exit %d, %q", bad.code, bad.stderr)
	}
}

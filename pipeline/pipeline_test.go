package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/argocd-image-resolver/argocd-image-resolver/plugin"
	"github.com/argocd-image-resolver/argocd-image-resolver/render"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// fakeBatch answers from a table by image, and records what it was asked.
type fakeBatch struct {
	mu      sync.Mutex
	calls   int
	app     string
	reqs    []resolve.Request
	answer  func(req resolve.Request) resolve.Answer
	err     error
	answers []resolve.Answer // when set, returned as is (a broken daemon)
}

func (f *fakeBatch) ResolveBatch(_ context.Context, app string, reqs []resolve.Request) ([]resolve.Answer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	f.app, f.reqs = app, append(f.reqs, reqs...)
	if f.err != nil {
		return nil, f.err
	}
	if f.answers != nil {
		return f.answers, nil
	}
	out := make([]resolve.Answer, len(reqs))
	for i, r := range reqs {
		out[i] = f.answer(r)
	}
	return out, nil
}

// resolved answers every request with tag (and digest), as the resolver would.
func resolved(tag string, pinned bool) func(resolve.Request) resolve.Answer {
	return func(r resolve.Request) resolve.Answer {
		res := &resolve.Result{Image: r.Image, Tag: tag, Digest: "sha256:" + strings.Repeat("ab", 32), Pinned: pinned,
			Strategy: resolve.Semver, Platforms: r.Policy.Platforms}
		res.Reference = res.ReferenceFor(r.Image)
		return resolve.Answer{Result: res}
	}
}

const deployment = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  template:
    spec:
      nodeSelector: {NODESELECTOR}
      initContainers:
        - name: migrate
          image: ghcr.io/org/web:1.0.0
      containers:
        - name: web
          image: ghcr.io/org/web:1.0.0 # the app
        - name: proxy
          image: docker.io/library/nginx:1.25
`

const customResource = `apiVersion: example.com/v1
kind: MyApp
metadata:
  name: job
spec:
  image: ghcr.io/org/job:0.1.0
`

func appDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func envWith(t *testing.T, params ...string) *plugin.Env {
	t.Helper()
	var ps []map[string]string
	for i := 0; i < len(params); i += 2 {
		ps = append(ps, map[string]string{"name": params[i], "string": params[i+1]})
	}
	b, _ := json.Marshal(ps)
	env, err := plugin.EnvFromEnviron([]string{"ARGOCD_APP_NAME=shop", "ARGOCD_APP_NAMESPACE=web", "ARGOCD_APP_PARAMETERS=" + string(b)})
	if err != nil {
		t.Fatal(err)
	}
	return env
}

func TestRender(t *testing.T) {
	arm, _ := resolve.ParsePlatform("linux/arm64")
	tests := []struct {
		name         string
		files        map[string]string
		params       []string
		settings     Settings
		batch        *fakeBatch
		wantOut      []string // in the manifests
		wantNotOut   []string
		wantErr      []string // in the error; no manifests
		wantRequests []resolve.Request
		wantNotes    []string
	}{
		{
			name:   "rewrites every field of the repository, annotates the object, keeps comments and other images",
			files:  map[string]string{"app.yaml": strings.Replace(deployment, "{NODESELECTOR}", "{}", 1)},
			params: []string{"image-list", "web=ghcr.io/org/web:~1"},
			batch:  &fakeBatch{answer: resolved("1.4.2", false)},
			wantOut: []string{"image: ghcr.io/org/web:1.4.2 # the app", "image: docker.io/library/nginx:1.25",
				`argocd-image-resolver/resolved: 'web=ghcr.io/org/web:1.4.2 (semver ~1)'`},
			wantNotOut:   []string{"ghcr.io/org/web:1.0.0"},
			wantRequests: []resolve.Request{{Image: "ghcr.io/org/web", Policy: resolve.PolicySpec{Constraint: "~1"}}},
		},
		{
			name:    "the annotation names the tag filters that narrowed the choice",
			files:   map[string]string{"app.yaml": strings.Replace(deployment, "{NODESELECTOR}", "{}", 1)},
			params:  []string{"image-list", "web=ghcr.io/org/web:^1.0", "web.allow-tags", `regexp:^1\.0\.`, "web.ignore-tags", "*-rc*"},
			batch:   &fakeBatch{answer: resolved("1.0.3", false)},
			wantOut: []string{`argocd-image-resolver/resolved: 'web=ghcr.io/org/web:1.0.3 (semver ^1.0; allow-tags regexp:^1\.0\.; ignore-tags *-rc*)'`},
			wantRequests: []resolve.Request{{Image: "ghcr.io/org/web", Policy: resolve.PolicySpec{Constraint: "^1.0", AllowTags: `regexp:^1\.0\.`,
				IgnoreTags: []string{"*-rc*"}}}},
		},
		{
			name:         "pinned: the reference carries the digest",
			files:        map[string]string{"app.yaml": strings.Replace(deployment, "{NODESELECTOR}", "{}", 1)},
			params:       []string{"image-list", "web=ghcr.io/org/web:~1", "web.pin-digest", "true"},
			batch:        &fakeBatch{answer: resolved("1.4.2", true)},
			wantOut:      []string{"image: ghcr.io/org/web:1.4.2@sha256:abab"},
			wantRequests: []resolve.Request{{Image: "ghcr.io/org/web", Policy: resolve.PolicySpec{Constraint: "~1", PinDigest: true}}},
		},
		{
			name:         "the operator's default platforms apply when policy and workload name none",
			files:        map[string]string{"app.yaml": strings.Replace(deployment, "{NODESELECTOR}", "{}", 1)},
			params:       []string{"image-list", "web=ghcr.io/org/web:~1"},
			settings:     Settings{DefaultPlatforms: []resolve.Platform{arm}},
			batch:        &fakeBatch{answer: resolved("1.4.2", false)},
			wantOut:      []string{"platforms linux/arm64"},
			wantRequests: []resolve.Request{{Image: "ghcr.io/org/web", Policy: resolve.PolicySpec{Constraint: "~1", Platforms: []string{"linux/arm64"}}}},
		},
		{
			name:         "the workload's nodeSelector wins over the default",
			files:        map[string]string{"app.yaml": strings.Replace(deployment, "{NODESELECTOR}", "{kubernetes.io/arch: amd64}", 1)},
			params:       []string{"image-list", "web=ghcr.io/org/web:~1"},
			settings:     Settings{DefaultPlatforms: []resolve.Platform{arm}},
			batch:        &fakeBatch{answer: resolved("1.4.2", false)},
			wantRequests: []resolve.Request{{Image: "ghcr.io/org/web", Policy: resolve.PolicySpec{Constraint: "~1", Platforms: []string{"linux/amd64"}}}},
		},
		{
			name:         "the policy's platforms win over the workload's",
			files:        map[string]string{"app.yaml": strings.Replace(deployment, "{NODESELECTOR}", "{kubernetes.io/arch: amd64}", 1)},
			params:       []string{"image-list", "web=ghcr.io/org/web:~1", "web.platforms", "linux/s390x"},
			batch:        &fakeBatch{answer: resolved("1.4.2", false)},
			wantRequests: []resolve.Request{{Image: "ghcr.io/org/web", Policy: resolve.PolicySpec{Constraint: "~1", Platforms: []string{"linux/s390x"}}}},
		},
		{
			name:         "extra image paths of the operator's settings",
			files:        map[string]string{"cr.yaml": customResource},
			params:       []string{"image-list", "job=ghcr.io/org/job:~0.1"},
			settings:     Settings{ExtraImagePaths: []render.ExtraPath{{Group: "example.com", Kind: "MyApp", Path: "spec.image"}}},
			batch:        &fakeBatch{answer: resolved("0.1.9", false)},
			wantOut:      []string{"image: ghcr.io/org/job:0.1.9"},
			wantRequests: []resolve.Request{{Image: "ghcr.io/org/job", Policy: resolve.PolicySpec{Constraint: "~0.1"}}},
		},
		{
			name:         "without the setting a custom resource is left as written",
			files:        map[string]string{"cr.yaml": customResource},
			params:       []string{"image-list", "job=ghcr.io/org/job:~0.1"},
			batch:        &fakeBatch{answer: resolved("0.1.9", false)},
			wantOut:      []string{"image: ghcr.io/org/job:0.1.0"},
			wantNotes:    []string{"no image field uses the repository of job"},
			wantRequests: nil,
		},
		{
			name:   "a failed resolution prints nothing and names the alias and every object",
			files:  map[string]string{"app.yaml": strings.Replace(deployment, "{NODESELECTOR}", "{}", 1)},
			params: []string{"image-list", "web=ghcr.io/org/web:~1"},
			batch: &fakeBatch{answer: func(resolve.Request) resolve.Answer {
				return resolve.AnswerOf(nil, &resolve.RegistryError{Op: "list tags", Image: "ghcr.io/org/web", Err: errors.New("503 Service Unavailable")})
			}},
			wantErr: []string{"image web (used by Deployment.apps/web)", "503 Service Unavailable"},
		},
		{
			name:    "the batch failing prints nothing",
			files:   map[string]string{"app.yaml": strings.Replace(deployment, "{NODESELECTOR}", "{}", 1)},
			params:  []string{"image-list", "web=ghcr.io/org/web:~1"},
			batch:   &fakeBatch{err: errors.New("daemon answered garbage")},
			wantErr: []string{"daemon answered garbage"},
		},
		{
			name:    "too few answers is an error, not a wrong tag",
			files:   map[string]string{"app.yaml": strings.Replace(deployment, "{NODESELECTOR}", "{}", 1)},
			params:  []string{"image-list", "web=ghcr.io/org/web:~1"},
			batch:   &fakeBatch{answers: []resolve.Answer{}},
			wantErr: []string{"the resolver answered 0 of 1 image requests; nothing was rewritten"},
		},
		{
			name:       "a plain app's subdirectory is not read by default, as Argo CD's directory source",
			files:      map[string]string{"app.yaml": customResource, "tests/app.yaml": strings.Replace(deployment, "{NODESELECTOR}", "{}", 1)},
			params:     []string{"image-list", "web=ghcr.io/org/web:~1"},
			batch:      &fakeBatch{answer: resolved("1.4.2", false)},
			wantNotOut: []string{"kind: Deployment"},
			wantNotes:  []string{"no image field uses the repository of web"},
		},
		{
			name:         "directory-recurse reads the subdirectories",
			files:        map[string]string{"app.yaml": customResource, "sub/app.yaml": strings.Replace(deployment, "{NODESELECTOR}", "{}", 1)},
			params:       []string{"image-list", "web=ghcr.io/org/web:~1", "directory-recurse", "true"},
			batch:        &fakeBatch{answer: resolved("1.4.2", false)},
			wantOut:      []string{"kind: MyApp", "image: ghcr.io/org/web:1.4.2 # the app"},
			wantRequests: []resolve.Request{{Image: "ghcr.io/org/web", Policy: resolve.PolicySpec{Constraint: "~1"}}},
		},
		{
			name:  "directory-include and directory-exclude select the files",
			files: map[string]string{"app.yaml": strings.Replace(deployment, "{NODESELECTOR}", "{}", 1), "cr.yaml": customResource, "tests/t.yaml": customResource},
			params: []string{"image-list", "web=ghcr.io/org/web:~1", "directory-recurse", "true",
				"directory-include", "{*.yaml,tests/*}", "directory-exclude", "{cr.yaml,tests/*}"},
			batch:        &fakeBatch{answer: resolved("1.4.2", false)},
			wantOut:      []string{"image: ghcr.io/org/web:1.4.2 # the app"},
			wantNotOut:   []string{"kind: MyApp"},
			wantRequests: []resolve.Request{{Image: "ghcr.io/org/web", Policy: resolve.PolicySpec{Constraint: "~1"}}},
		},
		{
			name:    "a bad directory parameter is refused",
			files:   map[string]string{"app.yaml": strings.Replace(deployment, "{NODESELECTOR}", "{}", 1)},
			params:  []string{"image-list", "web=ghcr.io/org/web:~1", "directory-recurse", "yes-please"},
			batch:   &fakeBatch{answer: resolved("1.4.2", false)},
			wantErr: []string{`parameter "directory-recurse": invalid value "yes-please"`},
		},
		{
			name:    "a bad policy is refused before anything is resolved",
			files:   map[string]string{"app.yaml": strings.Replace(deployment, "{NODESELECTOR}", "{}", 1)},
			params:  []string{"image-list", "web=ghcr.io/org/web", "web.update-strategy", "fastest"},
			batch:   &fakeBatch{answer: resolved("1.4.2", false)},
			wantErr: []string{`parameter "web.update-strategy": invalid value "fastest"`},
		},
	}
	workers := newTestWorkers(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := appDir(t, tt.files)
			// In a render worker too: the same manifests byte for byte, the same error.
			inWorker := tt.settings
			inWorker.Renderer = workers
			wout, _, werr := New(&fakeBatch{answer: tt.batch.answer, err: tt.batch.err, answers: tt.batch.answers}, inWorker).
				Render(context.Background(), dir, envWith(t, tt.params...))
			out, report, err := New(tt.batch, tt.settings).Render(context.Background(), dir, envWith(t, tt.params...))
			if !bytes.Equal(wout, out) || fmt.Sprint(werr) != fmt.Sprint(err) {
				t.Errorf("in a worker: %v\n%s\nin process: %v\n%s", werr, wout, err, out)
			}
			if len(tt.wantErr) > 0 {
				if err == nil || out != nil {
					t.Fatalf("err %v, %d bytes of manifests; want an error and none", err, len(out))
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not contain %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tt.wantOut {
				if !strings.Contains(string(out), w) {
					t.Errorf("manifests do not contain %q:\n%s", w, out)
				}
			}
			for _, w := range tt.wantNotOut {
				if strings.Contains(string(out), w) {
					t.Errorf("manifests still contain %q:\n%s", w, out)
				}
			}
			// One request per distinct image and policy a field uses, in the order
			// of first use: two fields of one image share one.
			sameRequest := func(a, b resolve.Request) bool {
				return fmt.Sprintf("%+v", a) == fmt.Sprintf("%+v", b) // nil and empty lists alike
			}
			if !slices.EqualFunc(tt.batch.reqs, tt.wantRequests, sameRequest) {
				t.Errorf("requests %+v\nwant     %+v", tt.batch.reqs, tt.wantRequests)
			}
			if len(tt.wantRequests) > 0 && (tt.batch.calls != 1 || tt.batch.app != "shop") {
				t.Errorf("%d batches for app %q, want one for shop", tt.batch.calls, tt.batch.app)
			}
			for _, w := range tt.wantNotes {
				if !slices.ContainsFunc(report.Notes, func(n string) bool { return strings.Contains(n, w) }) {
					t.Errorf("notes %q lack %q", report.Notes, w)
				}
			}
		})
	}
}

// The same inputs and answers give byte-identical manifests.
func TestRenderIsDeterministic(t *testing.T) {
	dir := appDir(t, map[string]string{"a.yaml": strings.Replace(deployment, "{NODESELECTOR}", "{}", 1), "b.yaml": customResource})
	settings := Settings{ExtraImagePaths: []render.ExtraPath{{Group: "example.com", Kind: "MyApp", Path: "spec.image"}}}
	var first []byte
	for i := range 5 {
		out, _, err := New(&fakeBatch{answer: resolved("2.0.0", true)}, settings).Render(context.Background(), dir,
			envWith(t, "image-list", "web=ghcr.io/org/web,job=ghcr.io/org/job"))
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = out
		} else if !bytes.Equal(out, first) {
			t.Fatalf("render %d differs:\n%s\n---\n%s", i, out, first)
		}
	}
}

func TestReportWriters(t *testing.T) {
	dir := appDir(t, map[string]string{"app.yaml": strings.Replace(deployment, "{NODESELECTOR}", "{}", 1)})
	batch := &fakeBatch{answer: func(r resolve.Request) resolve.Answer {
		a := resolved("1.4.2", false)(r)
		a.Result.Skipped = []resolve.Skip{{Tag: "1.5.0", Reason: "no linux/arm64"}}
		a.Result.Stale = []string{"tags of ghcr.io/org/web"}
		return a
	}}
	_, report, err := New(batch, Settings{}).Render(context.Background(), dir, envWith(t, "image-list", "web=ghcr.io/org/web:~1"))
	if err != nil {
		t.Fatal(err)
	}
	var table, notes bytes.Buffer
	if err := report.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"source: directory", "ALIAS", "web", "ghcr.io/org/web:1.4.2", "skipped 1.5.0: no linux/arm64", "STALE: tags of ghcr.io/org/web"} {
		if !strings.Contains(table.String(), w) {
			t.Errorf("table lacks %q:\n%s", w, table.String())
		}
	}
	report.WriteNotes(&notes)
	if got := notes.String(); got != "argocd-image-resolver: stale: web: tags of ghcr.io/org/web\n" {
		t.Errorf("notes %q", got)
	}
	v := report.View()
	if len(v.Images) != 2 || v.Images[0].Resolved != "ghcr.io/org/web:1.4.2" || v.Images[0].Alias != "web" {
		t.Errorf("view %+v", v)
	}
	var nilReport *Report
	nilReport.WriteNotes(&notes) // a render that failed before the policy was read

	// What a Kustomize render fetched from allowed hosts: in the table, the notes
	// and the JSON view.
	report.Remote = []render.RemoteInput{{Entry: "https://git.example/org/base//deploy?ref=main", Fetched: "https://git.example/org/base", Commit: "0123abcd"}}
	table.Reset()
	notes.Reset()
	if err := report.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	report.WriteNotes(&notes)
	line := "https://git.example/org/base//deploy?ref=main (git https://git.example/org/base at commit 0123abcd)"
	if !strings.Contains(table.String(), "remote: "+line+"\n") || !strings.Contains(notes.String(), "argocd-image-resolver: fetched: "+line+"\n") {
		t.Errorf("fetched input not reported:\n%s\n%s", table.String(), notes.String())
	}
	if v := report.View(); len(v.Remote) != 1 || v.Remote[0].Commit != "0123abcd" {
		t.Errorf("view's remote inputs %+v", v.Remote)
	}
}

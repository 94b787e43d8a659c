package render

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/pin/gittest"
)

func TestParseRemoteHost(t *testing.T) {
	for _, c := range []struct {
		in, want string
		http     bool
		bad      string // part of the error
	}{
		{in: "github.com", want: "github.com"},
		{in: " GitHub.com ", want: "github.com"},
		{in: "https://github.com/", want: "github.com"},
		{in: "*.githubusercontent.com", want: "*.githubusercontent.com"},
		{in: "git.example.com:8443", want: "git.example.com:8443"},
		{in: "http://10.0.0.7:3000", want: "10.0.0.7:3000", http: true},
		{in: "", bad: "no host"},
		{in: "ssh://github.com", bad: "the scheme ssh is not fetched"},
		{in: "github.com/org", bad: "without path"},
		{in: "user@github.com", bad: "without path, user"},
		{in: "*", bad: "not a host name"},
		{in: "a.*.com", bad: "not a host name"},
		{in: "-bad.com", bad: "not a host name"},
		{in: "host:port", bad: "the port is not a number"},
	} {
		h, err := ParseRemoteHost(c.in)
		if c.bad != "" {
			if err == nil || !strings.Contains(err.Error(), c.bad) || !strings.Contains(err.Error(), "accepted: host names") {
				t.Errorf("ParseRemoteHost(%q) = %v, %v; want an error with %q naming what is accepted", c.in, h, err, c.bad)
			}
			continue
		}
		if err != nil || h.Host != c.want || h.HTTP != c.http {
			t.Errorf("ParseRemoteHost(%q) = %+v, %v; want %s (http %v)", c.in, h, err, c.want, c.http)
		}
		if back, err := ParseRemoteHost(h.String()); err != nil || back != h {
			t.Errorf("ParseRemoteHost(%q).String() = %q reads back as %+v, %v", c.in, h.String(), back, err)
		}
	}
}

func TestRemoteHostAllows(t *testing.T) {
	hosts := func(s ...string) []RemoteHost {
		var out []RemoteHost
		for _, e := range s {
			h, err := ParseRemoteHost(e)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, h)
		}
		return out
	}
	for _, c := range []struct {
		hosts []RemoteHost
		url   string
		want  bool
	}{
		{hosts("github.com"), "https://github.com/org/repo", true},
		{hosts("github.com"), "https://GITHUB.com:443/org/repo", true},
		{hosts("github.com"), "http://github.com/org/repo", false},
		{hosts("github.com"), "https://github.com:8443/org/repo", false},
		{hosts("github.com"), "https://api.github.com/x", false},
		{hosts("github.com"), "https://github.com.evil.example/x", false},
		{hosts("*.githubusercontent.com"), "https://raw.githubusercontent.com/x", true},
		{hosts("*.githubusercontent.com"), "https://githubusercontent.com/x", false},
		{hosts("*.githubusercontent.com"), "https://evilgithubusercontent.com/x", false},
		{hosts("http://git.local:3000"), "http://git.local:3000/x", true},
		{hosts("http://git.local:3000"), "http://git.local/x", false},
		{hosts("http://git.local"), "http://git.local:80/x", true},
		{hosts("git.local:8443"), "https://git.local:8443/x", true},
		{nil, "https://github.com/x", false},
	} {
		u := mustURL(t, c.url)
		if got := remoteHostsAllow(c.hosts, u); got != c.want {
			t.Errorf("%v allows %s = %v, want %v", c.hosts, c.url, got, c.want)
		}
	}
}

func TestParseRemoteRef(t *testing.T) {
	for _, c := range []struct {
		ref               string
		repo, sub, gitRef string // repo "" when it is no git URL
		explicit          bool
		bad               string
	}{
		{ref: "https://github.com/org/repo//deploy/base?ref=v1.2.0", repo: "https://github.com/org/repo", sub: "deploy/base", gitRef: "v1.2.0", explicit: true},
		{ref: "github.com/org/repo/deploy?version=main", repo: "https://github.com/org/repo", sub: "deploy", gitRef: "main", explicit: true},
		{ref: "git::https://git.example.com/org/repo.git/deploy", repo: "https://git.example.com/org/repo.git", sub: "deploy", explicit: true},
		{ref: "https://dev.azure.com/org/project/_git/repo/path?ref=x", repo: "https://dev.azure.com/org/project/_git/repo", sub: "path", gitRef: "x", explicit: true},
		{ref: "https://raw.githubusercontent.com/org/repo/main/install.yaml", repo: "https://raw.githubusercontent.com/org/repo", sub: "main/install.yaml"},
		{ref: "https://example.com/x.yaml"},
		{ref: "https://github.com/org/repo//../../etc?ref=v1", bad: "leaves the repository"},
		{ref: "git@github.com:org/repo.git", bad: "only https://"},
		{ref: "ssh://git@github.com/org/repo", bad: "only https://"},
		{ref: "file:///etc", bad: "only https://"},
	} {
		spec, err := parseRemoteRef(c.ref)
		if c.bad != "" {
			if err == nil || !strings.Contains(err.Error(), c.bad) {
				t.Errorf("parseRemoteRef(%q) = %+v, %v; want an error with %q", c.ref, spec, err, c.bad)
			}
			continue
		}
		if err != nil {
			t.Errorf("parseRemoteRef(%q): %v", c.ref, err)
			continue
		}
		repo := ""
		if spec.repo != nil {
			repo = spec.repo.String()
		}
		if repo != c.repo || spec.sub != c.sub || spec.ref != c.gitRef || spec.explicitGit != c.explicit {
			t.Errorf("parseRemoteRef(%q) = repo %q sub %q ref %q explicit %v; want %q %q %q %v",
				c.ref, repo, spec.sub, spec.ref, spec.explicitGit, c.repo, c.sub, c.gitRef, c.explicit)
		}
	}
}

// remoteFixture is a repository checkout with an app, and the hosts it may reach.
type remoteFixture struct {
	repo  string
	hosts []RemoteHost
}

func newRemoteFixture(t testing.TB, allowed ...string) *remoteFixture {
	f := &remoteFixture{repo: t.TempDir()}
	for _, a := range allowed {
		h, err := ParseRemoteHost(a)
		if err != nil {
			t.Fatal(err)
		}
		f.hosts = append(f.hosts, h)
	}
	return f
}

// render writes the app's files and renders it.
func (f *remoteFixture) render(t *testing.T, ctx context.Context, files map[string]string) (string, error) {
	t.Helper()
	app := filepath.Join(f.repo, "app")
	os.RemoveAll(app)
	writeFiles(t, app, files)
	r, err := Render(ctx, app, Options{RepoRoot: f.repo, RemoteHosts: f.hosts})
	if err != nil {
		return "", err
	}
	var b bytes.Buffer
	if err := Write(&b, r.Objects); err != nil {
		t.Fatal(err)
	}
	return b.String(), nil
}

// renderEntry renders an app whose kustomization has one resource, entry.
func (f *remoteFixture) renderEntry(t *testing.T, entry string) error {
	t.Helper()
	_, err := f.render(t, context.Background(), map[string]string{"kustomization.yaml": "resources:\n- " + entry + "\n"})
	return err
}

// wantError checks that err is is and its message holds each of has.
func wantError(t *testing.T, err, is error, has ...string) {
	t.Helper()
	if !errors.Is(err, is) {
		t.Fatalf("error %v, want %v", err, is)
	}
	for _, h := range has {
		if !strings.Contains(err.Error(), h) {
			t.Errorf("error %q does not contain %q", err, h)
		}
	}
}

const (
	remoteCM    = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: remote\ndata:\n  from: the remote host\n"
	remotePatch = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: local\ndata:\n  patched: \"yes\"\n"
)

// An HTTP(S) file on an allowed host is fetched once and rendered as if it were
// in the repository; other hosts, plain HTTP to an HTTPS-only host and redirects
// elsewhere are refused without a request; a missing file names the answer.
func TestKustomizeRemoteFiles(t *testing.T) {
	var hits, elsewhereHits atomic.Int64
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhereHits.Add(1)
		fmt.Fprint(w, remoteCM)
	}))
	defer elsewhere.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.Header.Get("Authorization") != "" {
			t.Errorf("a credential was sent to %s", r.URL)
		}
		switch r.URL.Path {
		case "/cm.yaml":
			fmt.Fprint(w, remoteCM)
		case "/patch.yaml":
			fmt.Fprint(w, remotePatch)
		case "/app.properties":
			fmt.Fprint(w, "color=blue\n")
		case "/away.yaml":
			http.Redirect(w, r, elsewhere.URL+"/cm.yaml", http.StatusFound)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	local := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: local\ndata:\n  patched: \"no\"\n"

	// What the vendored copies render to is what the fetched ones must render to.
	vendored := newRemoteFixture(t)
	want, err := vendored.render(t, context.Background(), map[string]string{
		"kustomization.yaml": "resources:\n- local.yaml\n- cm.yaml\npatches:\n- path: patch.yaml\nconfigMapGenerator:\n- name: props\n  files:\n  - app.properties\n  - renamed=app.properties\n",
		"local.yaml":         local, "cm.yaml": remoteCM, "patch.yaml": remotePatch, "app.properties": "color=blue\n",
	})
	if err != nil {
		t.Fatal(err)
	}

	allowed := newRemoteFixture(t, srv.URL)
	got, err := allowed.render(t, context.Background(), map[string]string{
		"kustomization.yaml": "resources:\n- local.yaml\n- " + srv.URL + "/cm.yaml\npatches:\n- path: " + srv.URL + "/patch.yaml\n" +
			"configMapGenerator:\n- name: props\n  files:\n  - " + srv.URL + "/app.properties\n  - renamed=" + srv.URL + "/app.properties\n",
		"local.yaml": local,
	})
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("fetched render differs from the vendored one:\n--- fetched\n%s\n--- vendored\n%s", got, want)
	}
	if n := hits.Load(); n != 3 {
		t.Errorf("%d requests for 3 distinct remote files, want 3 (each fetched once)", n)
	}

	for _, c := range []struct {
		name  string
		hosts []string
		entry string
		is    error
		has   []string
		hits  int64 // requests to srv
		away  int64 // requests to the other server
	}{
		{name: "no host allowed", entry: srv.URL + "/cm.yaml", is: ErrRemote,
			has: []string{"app/kustomization.yaml", "resources entry", "kustomizeRemoteHosts", "vendor it"}},
		{name: "another host allowed", hosts: []string{"http://example.com"}, entry: srv.URL + "/cm.yaml", is: ErrRemote,
			has: []string{"the host " + strings.TrimPrefix(srv.URL, "http://") + " is not in kustomizeRemoteHosts (http://example.com)"}},
		{name: "plain HTTP to an HTTPS host", hosts: []string{strings.TrimPrefix(srv.URL, "http://")}, entry: srv.URL + "/cm.yaml", is: ErrRemote,
			has: []string{"plain HTTP", "list it as " + srv.URL}},
		{name: "redirect to a host not allowed", hosts: []string{srv.URL}, entry: srv.URL + "/away.yaml", is: ErrRemote,
			has: []string{"redirected to " + elsewhere.URL + "/cm.yaml", "not on an allowed host"}, hits: 1},
		{name: "missing file", hosts: []string{srv.URL}, entry: srv.URL + "/none.yaml", is: ErrRemoteFetch,
			has: []string{"GET " + srv.URL + "/none.yaml: 404 Not Found"}, hits: 1},
		{name: "ssh URL on an allowed host", hosts: []string{srv.URL}, entry: "git@127.0.0.1:org/repo.git", is: ErrRemote,
			has: []string{"only https://"}},
		{name: "credentials in the URL are not shown", hosts: []string{srv.URL}, entry: strings.Replace(srv.URL, "http://", "http://user:s3cret@", 1) + "/none.yaml", is: ErrRemoteFetch,
			has: []string{"404 Not Found"}, hits: 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			hits.Store(0)
			elsewhereHits.Store(0)
			err := newRemoteFixture(t, c.hosts...).renderEntry(t, c.entry)
			wantError(t, err, c.is, c.has...)
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("error shows the URL's password: %v", err)
			}
			if hits.Load() != c.hits || elsewhereHits.Load() != c.away {
				t.Errorf("requests: %d to the app's host, %d elsewhere; want %d and %d", hits.Load(), elsewhereHits.Load(), c.hits, c.away)
			}
		})
	}
}

// A remote file is bounded in bytes and time: a host that sends without end is cut
// at the bound, one that never answers at the render's deadline.
func TestKustomizeRemoteBounded(t *testing.T) {
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/endless.yaml":
			chunk := bytes.Repeat([]byte("# padding\n"), 1<<12)
			for {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
		case "/silent.yaml":
			select {
			case <-stop:
			case <-r.Context().Done():
			}
		}
	}))
	defer srv.Close()
	defer close(stop)
	fx := newRemoteFixture(t, srv.URL)

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	_, err := fx.render(t, context.Background(), map[string]string{"kustomization.yaml": "resources:\n- " + srv.URL + "/endless.yaml\n"})
	runtime.ReadMemStats(&after)
	t.Logf("endless file: %v after %s, %d MiB allocated", err, time.Since(start).Round(time.Millisecond), (after.TotalAlloc-before.TotalAlloc)>>20)
	if !errors.Is(err, ErrRemoteFetch) || !strings.Contains(err.Error(), "MiB") || !strings.Contains(err.Error(), "a bound of the sidecar") {
		t.Errorf("endless file: %v, want the bound named", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err = fx.render(t, ctx, map[string]string{"kustomization.yaml": "resources:\n- " + srv.URL + "/silent.yaml\n"})
	if !errors.Is(err, ErrDeadline) && !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("silent host: %v, want the render's deadline", err)
	}
}

// gitBases is a repository of Kustomize bases on a real git server (git
// http-backend): v1 is tagged, main has moved on.
type gitBases struct {
	srv     *gittest.Server
	url     string
	v1, tip string
}

const (
	baseKustomization = "resources:\n- deployment.yaml\n- ../common\n"
	commonFiles       = "resources:\n- cm.yaml\n"
	commonCM          = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: common\ndata:\n  a: b\n"
)

func deploymentYAML(tag string) string {
	return "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  template:\n    spec:\n      containers:\n      - name: web\n        image: ghcr.io/example/web:" + tag + "\n"
}

func newGitBases(t testing.TB, opts ...gittest.Option) *gitBases {
	t.Helper()
	g := &gitBases{srv: gittest.New(t, opts...)}
	g.url = g.srv.Init(t, "bases.git", map[string]string{
		"base/kustomization.yaml":   baseKustomization,
		"base/deployment.yaml":      deploymentYAML("1.0.0"),
		"common/kustomization.yaml": commonFiles,
		"common/cm.yaml":            commonCM,
	})
	g.v1 = g.srv.Head(t, "bases.git", "main")
	g.srv.Git(t, "bases.git", "-c", "user.name=gittest", "-c", "user.email=gittest@127.0.0.1", "tag", "-a", "-m", "v1", "v1", g.v1)
	g.srv.Git(t, "bases.git", "config", "uploadpack.allowAnySHA1InWant", "true")
	g.tip = g.srv.Commit(t, "bases.git", "main", map[string]string{"base/deployment.yaml": deploymentYAML("2.0.0")}, "web 2.0.0")
	return g
}

// A git base on an allowed host is fetched at its ref (tag, branch, commit, default
// branch) in two requests and rendered as the same base vendored into the
// repository; a base inside it may reach its siblings in the fetched repository.
func TestKustomizeRemoteGitBase(t *testing.T) {
	g := newGitBases(t)
	vendored := func(tag string) string {
		fx := newRemoteFixture(t)
		writeFiles(t, filepath.Join(fx.repo, "vendor"), map[string]string{
			"base/kustomization.yaml": baseKustomization, "base/deployment.yaml": deploymentYAML(tag),
			"common/kustomization.yaml": commonFiles, "common/cm.yaml": commonCM,
		})
		out, err := fx.render(t, context.Background(), map[string]string{"kustomization.yaml": "namePrefix: shop-\nresources:\n- ../vendor/base\n"})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	at1, at2 := vendored("1.0.0"), vendored("2.0.0")
	for _, c := range []struct {
		name, entry, want string
	}{
		{"tag", g.url + "//base?ref=v1", at1},
		{"branch", g.url + "//base?ref=main", at2},
		{"commit", g.url + "//base?ref=" + g.v1, at1},
		{"default branch", g.url + "//base", at2},
		{"version query and git:: prefix", "git::" + g.url + "//base?version=v1", at1},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := len(g.srv.Requests())
			fx := newRemoteFixture(t, g.srv.URL)
			got, err := fx.render(t, context.Background(), map[string]string{"kustomization.yaml": "namePrefix: shop-\nresources:\n- " + c.entry + "\n"})
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Errorf("render differs from the vendored base:\n--- fetched\n%s\n--- vendored\n%s", got, c.want)
			}
			if n := len(g.srv.Requests()) - before; n != 2 {
				t.Errorf("%d requests to the git server, want 2 (refs, then one pack)", n)
			}
		})
	}
	t.Run("bases field", func(t *testing.T) {
		fx := newRemoteFixture(t, g.srv.URL)
		got, err := fx.render(t, context.Background(), map[string]string{"kustomization.yaml": "namePrefix: shop-\nbases:\n- " + g.url + "//base?ref=v1\n"})
		if err != nil || got != at1 {
			t.Errorf("bases: %v\n%s", err, got)
		}
	})
}

// What goes wrong with a git base is said, naming the repository and ref; a remote
// entry inside a fetched base is held to the same hosts.
func TestKustomizeRemoteGitErrors(t *testing.T) {
	g := newGitBases(t)
	var other atomic.Int64
	otherHost := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		other.Add(1)
		fmt.Fprint(w, remoteCM)
	}))
	defer otherHost.Close()
	g.srv.Branch(t, "bases.git", "nested", "main")
	g.srv.Commit(t, "bases.git", "nested", map[string]string{
		"nested/kustomization.yaml": "resources:\n- " + otherHost.URL + "/cm.yaml\n",
		"escape/kustomization.yaml": "resources:\n- ../../../local-secret.yaml\n",
	}, "a base that reaches another host, one that reaches out of its repository")
	for _, c := range []struct {
		name, entry string
		hosts       []string
		is          error
		has         []string
	}{
		{name: "unknown ref", entry: g.url + "//base?ref=v9", hosts: []string{g.srv.URL}, is: ErrRemoteFetch,
			has: []string{"git repository " + g.url + " at v9", `no tag or branch "v9"`}},
		{name: "no such directory", entry: g.url + "//nope?ref=v1", hosts: []string{g.srv.URL}, is: ErrRemoteFetch,
			has: []string{"has no directory nope"}},
		{name: "no such repository", entry: g.srv.URL + "/missing.git//base", hosts: []string{g.srv.URL}, is: ErrRemoteFetch,
			has: []string{"repository not found"}},
		{name: "a fetched base reaching out of its repository", entry: g.url + "//escape?ref=nested", hosts: []string{g.srv.URL}, is: ErrRemoteFetch,
			has: []string{g.url + "//escape/kustomization.yaml", `resources entry "../../../local-secret.yaml"`, "it leaves the fetched repository"}},
		{name: "nested remote on a host not allowed", entry: g.url + "//nested?ref=nested", hosts: []string{g.srv.URL}, is: ErrRemote,
			has: []string{g.url + "//nested/kustomization.yaml", "resources entry", "is not in kustomizeRemoteHosts"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := newRemoteFixture(t, c.hosts...).renderEntry(t, c.entry)
			wantError(t, err, c.is, c.has...)
		})
	}
	if other.Load() != 0 {
		t.Errorf("%d requests reached the host not allowed", other.Load())
	}
	t.Run("nested remote on an allowed host", func(t *testing.T) {
		fx := newRemoteFixture(t, g.srv.URL, otherHost.URL)
		got, err := fx.render(t, context.Background(), map[string]string{"kustomization.yaml": "resources:\n- " + g.url + "//nested?ref=nested\n"})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(got, "from: the remote host") || other.Load() != 1 {
			t.Errorf("nested remote file not rendered once (%d requests):\n%s", other.Load(), got)
		}
	})
}

// A private repository asks for credentials; remote bases are fetched without any,
// and the message says so.
func TestKustomizeRemoteGitPrivate(t *testing.T) {
	g := newGitBases(t, gittest.WithBasicAuth("user", "pass"))
	fx := newRemoteFixture(t, g.srv.URL)
	_, err := fx.render(t, context.Background(), map[string]string{"kustomization.yaml": "resources:\n- " + g.url + "//base?ref=v1\n"})
	if !errors.Is(err, ErrRemoteFetch) || !strings.Contains(err.Error(), "requires credentials") {
		t.Errorf("private repository: %v", err)
	}
}

// A render in a worker fetches as one in process does: same bytes.
func TestWorkersRemoteSameOutput(t *testing.T) {
	g := newGitBases(t)
	fx := newRemoteFixture(t, g.srv.URL)
	app := filepath.Join(fx.repo, "app")
	writeFiles(t, app, map[string]string{"kustomization.yaml": "resources:\n- " + g.url + "//base?ref=v1\n"})
	opts := Options{RepoRoot: fx.repo, RemoteHosts: fx.hosts}
	want, err := Render(context.Background(), app, opts)
	if err != nil {
		t.Fatal(err)
	}
	tw := newTestWorkers(t, 1)
	got, err := tw.Render(context.Background(), app, opts)
	if err != nil {
		t.Fatal(err)
	}
	if g, w := writeString(t, []*Rendered{got}), writeString(t, []*Rendered{want}); g != w || !strings.Contains(g, "web:1.0.0") {
		t.Errorf("worker output differs from in-process:\n--- worker\n%s\n--- in process\n%s", g, w)
	}
	if !reflect.DeepEqual(got.Remote, want.Remote) || len(got.Remote) != 1 {
		t.Errorf("worker reports fetched %v, in process %v", got.Remote, want.Remote)
	}
}

// A render says what it fetched: each entry, and the commit a git ref named.
func TestRemoteInputsReported(t *testing.T) {
	g := newGitBases(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, remoteCM) }))
	defer srv.Close()
	fx := newRemoteFixture(t, g.srv.URL, srv.URL)
	app := filepath.Join(fx.repo, "app")
	secret := strings.Replace(srv.URL, "http://", "http://user:s3cret@", 1)
	writeFiles(t, app, map[string]string{"kustomization.yaml": "resources:\n- " + g.url + "//base?ref=main\n- " + secret + "/cm.yaml\n"})
	r, err := Render(context.Background(), app, Options{RepoRoot: fx.repo, RemoteHosts: fx.hosts})
	if err != nil {
		t.Fatal(err)
	}
	want := []RemoteInput{
		{Entry: g.url + "//base?ref=main", Fetched: g.url, Commit: g.tip},
		{Entry: srv.URL + "/cm.yaml", Fetched: srv.URL + "/cm.yaml"},
	}
	if !reflect.DeepEqual(r.Remote, want) {
		t.Errorf("fetched %+v, want %+v", r.Remote, want)
	}
	if s := r.Remote[0].String(); s != g.url+"//base?ref=main (git "+g.url+" at commit "+g.tip+")" {
		t.Errorf("report line %q", s)
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// Remote entries and host entries come from app repositories and operators: any
// string is read without a panic, a git path never leaves its repository, and a
// host entry reads back as itself.
func FuzzRemoteEntry(f *testing.F) {
	for _, s := range []string{"https://github.com/org/repo//deploy?ref=v1", "git::https://h/o/r.git/x", "github.com/o/r",
		"https://dev.azure.com/o/p/_git/r/sub", "https://h//", "https://h/o/r//../x", "http://[::1]:80/a/b", "*.example.com", "http://10.0.0.1:3000"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if spec, err := parseRemoteRef(s); err == nil && spec.repo != nil {
			if spec.sub == ".." || strings.HasPrefix(spec.sub, "../") || strings.HasPrefix(spec.sub, "/") {
				t.Errorf("parseRemoteRef(%q): directory %q leaves the repository", s, spec.sub)
			}
		}
		if h, err := ParseRemoteHost(s); err == nil {
			if back, err := ParseRemoteHost(h.String()); err != nil || back != h {
				t.Errorf("ParseRemoteHost(%q) = %+v reads back as %+v, %v", s, h, back, err)
			}
		}
		_ = redactRef(s)
	})
}

// A pack of a few KiB that unpacks to more than a file's bound is refused from the
// objects' headers, before any is unpacked.
func TestKustomizeRemoteGitPackBomb(t *testing.T) {
	g := newGitBases(t)
	g.srv.Commit(t, "bases.git", "main", map[string]string{"base/zeros.bin": strings.Repeat("\x00", maxFileSize+1)}, "65 MiB of zeros")
	fx := newRemoteFixture(t, g.srv.URL)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	err := fx.renderEntry(t, g.url+"//base?ref=main")
	runtime.ReadMemStats(&after)
	allocated := (after.TotalAlloc - before.TotalAlloc) >> 20
	// allocations of the package's other tests count too: logged, not asserted
	t.Logf("%v after %s, %d MiB allocated", err, time.Since(start).Round(time.Millisecond), allocated)
	wantError(t, err, ErrRemoteFetch, fmt.Sprintf("it holds an object of %d bytes, over 64 MiB (a bound of the sidecar)", maxFileSize+1))
}

func TestDeltaTargetSize(t *testing.T) {
	for _, c := range []struct {
		d    []byte
		want int64
	}{
		{[]byte{0x05, 0x0a}, 10},
		{[]byte{0x80, 0x01, 0x80, 0x80, 0x01}, 1 << 14},
		{[]byte{0x05}, math.MaxInt64},
		{[]byte{0x05, 0x80}, math.MaxInt64},
		{nil, math.MaxInt64},
	} {
		if got := deltaTargetSize(c.d); got != c.want {
			t.Errorf("deltaTargetSize(%x) = %d, want %d", c.d, got, c.want)
		}
	}
}

// With HTTP(S)_PROXY set, remote entries go through the proxy (as registry
// requests do); the allow-list is checked against the entry's host.
func TestKustomizeRemoteThroughProxy(t *testing.T) {
	var seen []string
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, r.Method+" "+r.URL.String())
		fmt.Fprint(w, remoteCM)
	}))
	defer proxy.Close()
	t.Setenv("HTTP_PROXY", proxy.URL)
	t.Setenv("NO_PROXY", "")
	fx := newRemoteFixture(t, "http://manifests.example")
	got, err := fx.render(t, context.Background(), map[string]string{"kustomization.yaml": "resources:\n- http://manifests.example/cm.yaml\n"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got, "from: the remote host") || !reflect.DeepEqual(seen, []string{"GET http://manifests.example/cm.yaml"}) {
		t.Errorf("proxy saw %v; render:\n%s", seen, got)
	}
	err = newRemoteFixture(t, "http://manifests.example").renderEntry(t, "http://elsewhere.example/cm.yaml")
	wantError(t, err, ErrRemote, "the host elsewhere.example is not in kustomizeRemoteHosts")
	if len(seen) != 1 {
		t.Errorf("a host not allowed reached the proxy: %v", seen)
	}
}

package render

import (
	"context"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// A remote base that includes itself, directly, through other bases or a local
// sibling, or by another spelling of its URL, is named as a cycle at once with
// its chain of entries; a base reached twice without a cycle renders.
func TestKustomizeRemoteCycle(t *testing.T) {
	g := newGitBases(t)
	u := g.url
	other := strings.Replace(u, "127.0.0.1", "localhost", 1) // the same server by another host name
	g.srv.Commit(t, "bases.git", "main", map[string]string{
		"self/kustomization.yaml":     "resources:\n- " + u + "//self?ref=main\n",
		"a/kustomization.yaml":        "resources:\n- " + u + "//b?ref=main\n",
		"b/kustomization.yaml":        "resources:\n- " + u + "//c?ref=main\n",
		"c/kustomization.yaml":        "resources:\n- " + u + "//a?ref=main\n",
		"spelled/kustomization.yaml":  "resources:\n- git::" + u + "/spelled/?version=main\n",
		"default/kustomization.yaml":  "resources:\n- " + u + "//default\n",
		"host/kustomization.yaml":     "resources:\n- " + other + "//host?ref=main\n",
		"loop/kustomization.yaml":     "resources:\n- ../via\n",
		"via/kustomization.yaml":      "resources:\n- " + u + "//loop?ref=main\n",
		"left/kustomization.yaml":     "resources:\n- " + u + "//common?ref=main\n",
		"right/kustomization.yaml":    "namePrefix: right-\nresources:\n- " + u + "//common?ref=main\n",
		"diamond/kustomization.yaml":  "resources:\n- " + u + "//left?ref=main\n- " + u + "//right?ref=main\n",
		"selfless/kustomization.yaml": "resources:\n- " + u + "//base?ref=main\n",
	}, "bases that include themselves, and a diamond that does not")
	for _, c := range []struct {
		name, entry string
		chain       string // "" for a render that succeeds
		also        string // more of the error
		reqs        int    // to the git server: 2 a fetch (refs, pack)
		objects     []string
	}{
		{name: "itself", entry: u + "//self?ref=main", chain: u + "//self?ref=main -> " + u + "//self?ref=main", reqs: 2},
		{name: "through others", entry: u + "//a?ref=main",
			chain: u + "//a?ref=main -> " + u + "//b?ref=main -> " + u + "//c?ref=main -> " + u + "//a?ref=main", reqs: 2},
		{name: "another spelling", entry: u + "//spelled?ref=main",
			chain: u + "//spelled?ref=main -> git::" + u + "/spelled/?version=main", also: "is " + u + "//spelled?ref=main again", reqs: 2},
		{name: "the default branch", entry: u + "//default?ref=main",
			chain: u + "//default?ref=main -> " + u + "//default", also: `directory "/default"`, reqs: 4},
		{name: "another host name", entry: u + "//host?ref=main",
			chain: u + "//host?ref=main -> " + other + "//host?ref=main", reqs: 4},
		{name: "through a local sibling", entry: u + "//loop?ref=main",
			chain: u + "//loop?ref=main -> " + u + "//loop?ref=main", reqs: 2},
		{name: "a diamond is no cycle", entry: u + "//diamond?ref=main", reqs: 2, objects: []string{"name: common\n", "name: right-common\n"}},
		{name: "a base of the same repository is no cycle", entry: u + "//selfless?ref=main", reqs: 2, objects: []string{"name: web\n", "name: common\n"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			fx := newRemoteFixture(t, g.srv.URL, strings.TrimSuffix(other, "/bases.git"))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			before := len(g.srv.Requests())
			start := time.Now()
			out, err := fx.render(t, ctx, map[string]string{"kustomization.yaml": "resources:\n- " + c.entry + "\n"})
			took := time.Since(start)
			t.Logf("%s: %v in %v", c.name, err, took.Round(time.Millisecond))
			if n := len(g.srv.Requests()) - before; n != c.reqs {
				t.Errorf("%d requests to the git server, want %d (each repository and ref fetched once)", n, c.reqs)
			}
			if c.chain == "" {
				if err != nil {
					t.Fatal(err)
				}
				for _, o := range c.objects {
					if !strings.Contains(out, o) {
						t.Errorf("render lacks %q:\n%s", o, out)
					}
				}
				return
			}
			wantError(t, err, ErrRemoteFetch, "a cycle of remote bases: "+c.chain+" (commit "+g.srv.Head(t, "bases.git", "main"), c.also)
			if took > 5*time.Second {
				t.Errorf("the cycle was named after %v; want within 5 s", took)
			}
		})
	}
	t.Run("in a worker", func(t *testing.T) {
		fx := newRemoteFixture(t, g.srv.URL)
		app := filepath.Join(fx.repo, "app")
		writeFiles(t, app, map[string]string{"kustomization.yaml": "resources:\n- " + u + "//a?ref=main\n"})
		tw := newTestWorkers(t, 1)
		start := time.Now()
		_, err := tw.Render(context.Background(), app, Options{RepoRoot: fx.repo, RemoteHosts: fx.hosts})
		took := time.Since(start)
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		t.Logf("worker: %v in %v", err, took.Round(time.Millisecond))
		wantError(t, err, ErrRemoteFetch, "a cycle of remote bases: "+u+"//a?ref=main -> "+u+"//b?ref=main")
		if took > 5*time.Second {
			t.Errorf("the cycle was named after %v; want within 5 s", took)
		}
	})
}

func TestFetchKey(t *testing.T) {
	same := []string{
		"https://git.example.com/org/repo.git//deploy?ref=v1",
		"git::https://git.example.com/org/repo.git//deploy?ref=v1",
		"https://GIT.example.com:443/org/repo.git/deploy/?version=v1",
		"HTTPS://git.example.com/org/repo.git//deploy/?ref=v1",
		"https://user:pw@git.example.com/org/repo.git//deploy?ref=v1",
	}
	for _, s := range same[1:] {
		if a, b := fetchKey(same[0], roleResource), fetchKey(s, roleResource); a != b {
			t.Errorf("fetchKey(%q) = %q, fetchKey(%q) = %q; want the same", same[0], a, s, b)
		}
	}
	for _, s := range []string{
		"https://git.example.com/org/repo.git//deploy?ref=v2",
		"https://git.example.com/org/repo.git//other?ref=v1",
		"https://git.example.com:8443/org/repo.git//deploy?ref=v1",
		"http://git.example.com/org/repo.git//deploy?ref=v1",
		"https://git.example.com/org/other.git//deploy?ref=v1",
	} {
		if fetchKey(s, roleResource) == fetchKey(same[0], roleResource) {
			t.Errorf("fetchKey(%q) = fetchKey(%q); want them apart", s, same[0])
		}
	}
	if fetchKey("https://[::1]:443/o/r.git//d", roleBase) != fetchKey("https://[::1]/o/r.git//d", roleBase) {
		t.Error("an IPv6 host with its default port is another key")
	}
}

package pin_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/argocd-image-resolver/argocd-image-resolver/internal/testio"
	"github.com/argocd-image-resolver/argocd-image-resolver/pin"
	"github.com/argocd-image-resolver/argocd-image-resolver/pin/gittest"
)

// writerTestTarget keeps pins as "alias=reference" lines in one file: a target
// of the tests' own, so that they depend on no real target.
type writerTestTarget struct{ file string }

func (t writerTestTarget) String() string { return "lines:" + t.file }
func (t writerTestTarget) File() string   { return t.file }

func (t writerTestTarget) Read(content []byte, images map[string]string) (map[string]pin.Pin, error) {
	out := map[string]pin.Pin{}
	for i, line := range strings.Split(string(content), "\n") {
		if line == "" {
			continue
		}
		alias, ref, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("line %d: %q: want alias=reference", i+1, line)
		}
		if image, want := images[alias]; want {
			out[alias] = pin.Pin{Alias: alias, Image: image, Reference: ref}
		}
	}
	return out, nil
}

func (t writerTestTarget) Apply(content []byte, pins []pin.Pin) ([]byte, error) {
	lines := strings.Split(strings.TrimSuffix(string(content), "\n"), "\n")
	if len(content) == 0 {
		lines = nil
	}
	for _, p := range pins {
		set := false
		for i, line := range lines {
			if alias, _, _ := strings.Cut(line, "="); alias == p.Alias {
				lines[i], set = p.Alias+"="+p.Reference, true
			}
		}
		if !set {
			lines = append(lines, p.Alias+"="+p.Reference)
		}
	}
	return []byte(strings.Join(lines, "\n") + "\n"), nil
}

const (
	repoName = "apps.git"
	user     = "pinbot"
	password = "hunter2-very-secret"
)

// fixture is a git server with one repository, and what a writer reports.
type fixture struct {
	s   *gittest.Server
	url string
	reg *prometheus.Registry
	log *testio.SyncBuffer
}

var initialFiles = map[string]string{
	"README.md":                   "apps\n",
	"apps/web/kustomization.yaml": "resources: [deploy.yaml]\n",
	"apps/web/pins.txt":           "web=ghcr.io/org/web:1.2.3\n",
	"apps/api/pins.txt":           "api=ghcr.io/org/api:2.0.0\n",
	"apps/worker/pins.txt":        "worker=ghcr.io/org/worker:3.0.0\n",
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	s := gittest.New(t, gittest.WithBasicAuth(user, password))
	return &fixture{s: s, url: s.Init(t, repoName, initialFiles), reg: prometheus.NewRegistry(), log: &testio.SyncBuffer{}}
}

func basicAuth(pass string) pin.WriterOption {
	return pin.WithAuth(func(string) (transport.AuthMethod, error) {
		return &githttp.BasicAuth{Username: user, Password: pass}, nil
	})
}

// writer returns a Writer for the fixture with quick retries; opts come last.
func (f *fixture) writer(opts ...pin.WriterOption) *pin.Writer {
	base := []pin.WriterOption{
		basicAuth(password),
		pin.WithAuthor("Pin Bot", "pinbot@example.com"),
		pin.WithRetry(5, 5*time.Millisecond),
		pin.WithMetrics(f.reg),
		pin.WithLogger(slog.New(slog.NewJSONHandler(f.log, &slog.HandlerOptions{Level: slog.LevelDebug}))),
	}
	return pin.NewWriter(append(base, opts...)...)
}

// change pins app's alias (in apps/<app>/pins.txt) from old to tag.
func (f *fixture) change(branch, app, alias, old, tag string) pin.Change {
	image := "ghcr.io/org/" + alias
	base := ""
	if old != "" {
		base = image + ":" + old
	}
	return pin.Change{RepoURL: f.url, Branch: branch, Edit: pin.Edit{
		App: app, Dir: "apps/" + app, Target: writerTestTarget{file: "pins.txt"},
		Pins: []pin.Pin{{Alias: alias, Image: image, Reference: image + ":" + tag, Tag: tag, Policy: "semver ~" + tag[:1]}},
		Base: map[string]string{alias: base},
	}}
}

// metric returns the value of a counter or gauge in reg (0 when absent).
func metric(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				ok := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						ok = true
					}
				}
				if !ok {
					continue next
				}
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return 0
}

func TestWriteCommitsAndPushes(t *testing.T) {
	f := newFixture(t)
	w := f.writer()
	ctx := context.Background()
	initial := f.s.Head(t, repoName, "main")

	res, err := w.Write(ctx, []pin.Change{f.change("", "web", "web", "1.2.3", "1.3.0")})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Pushed || res.Commit != f.s.Head(t, repoName, "main") || res.Branch != "main" || res.Attempts != 1 || len(res.Applied) != 1 || len(res.Conflicts) != 0 {
		t.Fatalf("result %+v (tip %s)", res, f.s.Head(t, repoName, "main"))
	}
	if got := f.s.File(t, repoName, "main", "apps/web/pins.txt"); got != "web=ghcr.io/org/web:1.3.0\n" {
		t.Errorf("pins.txt = %q", got)
	}
	// the author and committer, the message, one file changed, the parent
	show := f.s.Show(t, repoName, res.Commit, "-s", "--format=%an <%ae>|%cn <%ce>|%P%n%B")
	for _, want := range []string{
		"Pin Bot <pinbot@example.com>|Pin Bot <pinbot@example.com>|" + initial,
		"argocd-image-resolver: web 1.2.3 -> 1.3.0 (web)\n\n",
		"- web web: ghcr.io/org/web:1.2.3 -> ghcr.io/org/web:1.3.0\n  policy: semver ~1\n  file: apps/web/pins.txt\n",
	} {
		if !strings.Contains(show, want) {
			t.Errorf("commit lacks %q:\n%s", want, show)
		}
	}
	if got := strings.TrimSpace(f.s.Git(t, repoName, "diff", "--name-only", initial, res.Commit)); got != "apps/web/pins.txt" {
		t.Errorf("files changed: %q", got)
	}
	f.s.Fsck(t, repoName)

	// the same pins again: nothing to commit, nothing pushed
	pushes := f.s.Pushes(repoName)
	res, err = w.Write(ctx, []pin.Change{f.change("", "web", "web", "1.2.3", "1.3.0")})
	if err != nil || res.Pushed || res.Commit != "" || len(res.Applied) != 0 || len(res.Conflicts) != 0 {
		t.Fatalf("second write: %+v, %v", res, err)
	}
	if n := len(f.s.Log(t, repoName, "main")); n != 2 || f.s.Pushes(repoName) != pushes {
		t.Errorf("second write committed or pushed: %d commits, %d pushes", n, f.s.Pushes(repoName)-pushes)
	}

	// a new file, in a new directory (spelled ./apps/new/ as an app's path may
	// be), and a second app in the same commit
	c := f.change("main", "new", "new", "", "0.1.0")
	c.Edit.Dir = "./apps/new/"
	res, err = w.Write(ctx, []pin.Change{c, f.change("main", "api", "api", "2.0.0", "2.1.0")})
	if err != nil || !res.Pushed || len(res.Applied) != 2 {
		t.Fatalf("third write: %+v, %v", res, err)
	}
	if got := f.s.File(t, repoName, "main", "apps/new/pins.txt"); got != "new=ghcr.io/org/new:0.1.0\n" {
		t.Errorf("new pins.txt = %q", got)
	}
	if got := f.s.Log(t, repoName, "main")[0]; got != "argocd-image-resolver: pin 2 images of 2 apps" {
		t.Errorf("subject %q", got)
	}
	f.s.Fsck(t, repoName)
	f.s.NoForcePush(t, repoName, "main")

	if got := metric(t, f.reg, "argocd_image_resolver_pin_commits_total"); got != 2 {
		t.Errorf("pin_commits_total %v", got)
	}
	if got := metric(t, f.reg, "argocd_image_resolver_pin_pushes_total", "outcome", "ok"); got != 2 {
		t.Errorf("pin_pushes_total{ok} %v", got)
	}
	if !strings.Contains(f.log.String(), `"msg":"pins committed"`) || !strings.Contains(f.log.String(), `"commit":"`+res.Commit+`"`) {
		t.Errorf("no commit log line:\n%s", f.log)
	}
}

func TestWriteDefaultBranchAndMessageTemplate(t *testing.T) {
	f := newFixture(t)
	f.s.Branch(t, repoName, "trunk", "main")
	f.s.SetHead(t, repoName, "trunk")
	w := f.writer(pin.WithMessage("pins: {{range .Changes}}{{.App}}/{{.Alias}}={{.Tag}} {{end}}\n\non {{.Branch}}"))
	res, err := w.Write(context.Background(), []pin.Change{f.change("HEAD", "web", "web", "1.2.3", "1.4.0")})
	if err != nil || res.Branch != "trunk" {
		t.Fatalf("%+v, %v", res, err)
	}
	if got := f.s.Log(t, repoName, "trunk")[0]; got != "pins: web/web=1.4.0" {
		t.Errorf("subject %q", got)
	}
	if got := f.s.Show(t, repoName, "trunk", "-s", "--format=%b"); !strings.Contains(got, "on trunk") {
		t.Errorf("body %q", got)
	}
	if len(f.s.Log(t, repoName, "main")) != 1 {
		t.Errorf("main moved")
	}

	// a template that does not execute: every write fails, naming it
	if err := pin.CheckMessage("{{.Nope}}"); err == nil || !strings.Contains(err.Error(), "{{.Nope}}") {
		t.Errorf("CheckMessage: %v", err)
	}
	w = f.writer(pin.WithMessage("{{.Nope}}"))
	if _, err := w.Write(context.Background(), []pin.Change{f.change("", "web", "web", "1.4.0", "1.5.0")}); err == nil || !strings.Contains(err.Error(), "{{.Nope}}") {
		t.Errorf("bad template: %v", err)
	}
}

func TestWriteBadInput(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	before := f.s.Log(t, repoName, "main")

	// a wrong password: refused, named, no credential in the error or the logs
	w := f.writer(basicAuth("wrong-"+password), pin.WithRetry(3, time.Millisecond))
	_, err := w.Write(ctx, []pin.Change{f.change("", "web", "web", "1.2.3", "1.3.0")})
	if err == nil || !errors.Is(err, pin.ErrCredentials) || !strings.Contains(err.Error(), f.url) || !strings.Contains(err.Error(), "refused the credentials") {
		t.Errorf("wrong password: %v", err)
	}
	if err != nil && strings.Contains(err.Error(), password) || strings.Contains(f.log.String(), password) {
		t.Errorf("the password leaked: %v\n%s", err, f.log)
	}
	if n := metric(t, f.reg, "argocd_image_resolver_pin_push_retries_total"); n != 0 {
		t.Errorf("refused credentials were retried %v times", n)
	}

	// credentials in the URL itself: not in the error either
	withUser := strings.Replace(f.url, "http://", "http://"+user+":wrong-"+password+"@", 1)
	c := f.change("", "web", "web", "1.2.3", "1.3.0")
	c.RepoURL = withUser
	w = f.writer(pin.WithAuth(func(string) (transport.AuthMethod, error) { return nil, nil }))
	_, err = w.Write(ctx, []pin.Change{c})
	if err == nil || !errors.Is(err, pin.ErrCredentials) || strings.Contains(err.Error(), password) || !strings.Contains(err.Error(), "refused the credentials") {
		t.Errorf("credentials in the URL: %v", err)
	}

	// none at all
	w = f.writer(pin.WithAuth(func(string) (transport.AuthMethod, error) { return nil, nil }))
	_, err = w.Write(ctx, []pin.Change{f.change("", "web", "web", "1.2.3", "1.3.0")})
	if err == nil || !errors.Is(err, pin.ErrCredentials) || !strings.Contains(err.Error(), "none are configured") {
		t.Errorf("no credentials: %v", err)
	}

	// a branch that does not exist
	w = f.writer()
	_, err = w.Write(ctx, []pin.Change{f.change("pins", "web", "web", "1.2.3", "1.3.0")})
	if err == nil || !errors.Is(err, pin.ErrBranchNotFound) || !strings.Contains(err.Error(), `no branch "pins"`) || !strings.Contains(err.Error(), f.url) {
		t.Errorf("missing branch: %v", err)
	}

	// changes for two branches in one Write; a path out of the repository
	_, err = w.Write(ctx, []pin.Change{f.change("main", "web", "web", "1.2.3", "1.3.0"), f.change("other", "api", "api", "2.0.0", "2.1.0")})
	if err == nil || !strings.Contains(err.Error(), "must share the repository, branch, pin-push and pin-pr-group") || !strings.Contains(err.Error(), "branch other") {
		t.Errorf("two branches: %v", err)
	}
	bad := f.change("", "web", "web", "1.2.3", "1.3.0")
	bad.Edit.Dir = "../elsewhere"
	if _, err = w.Write(ctx, []pin.Change{bad}); err == nil || !strings.Contains(err.Error(), "..") {
		t.Errorf("path out of the repository: %v", err)
	}
	bad = f.change("main:refs/heads/other", "web", "web", "1.2.3", "1.3.0")
	if _, err = w.Write(ctx, []pin.Change{bad}); err == nil || !strings.Contains(err.Error(), `branch "main:refs/heads/other"`) {
		t.Errorf("a refspec as branch: %v", err)
	}

	// a file the target cannot read: the error names it
	f.s.Commit(t, repoName, "main", map[string]string{"apps/web/pins.txt": "garbage\n"}, "break the file")
	_, err = w.Write(ctx, []pin.Change{f.change("", "web", "web", "1.2.3", "1.3.0")})
	if err == nil || !strings.Contains(err.Error(), "apps/web/pins.txt") || !strings.Contains(err.Error(), "alias=reference") {
		t.Errorf("unreadable file: %v", err)
	}
	before = append([]string{"break the file"}, before...)

	// nothing committed by any of them
	if got := f.s.Log(t, repoName, "main"); !slices.Equal(got, before) {
		t.Errorf("log %q, want %q", got, before)
	}
	if got := f.s.Branches(t, repoName); !slices.Equal(got, []string{"main"}) {
		t.Errorf("branches %q", got)
	}
	if n := f.s.Pushes(repoName); n != 0 {
		t.Errorf("%d pushes reached the repository", n)
	}
	if got := metric(t, f.reg, "argocd_image_resolver_pin_pushes_total", "outcome", "failed"); got != 4 {
		t.Errorf("pin_pushes_total{failed} %v, want 4 (3 refused credentials, 1 missing branch)", got)
	}
}

func TestWriteRefusedByTheServer(t *testing.T) {
	f := newFixture(t)
	hook := filepath.Join(f.s.Dir(repoName), "hooks", "pre-receive")
	if err := os.WriteFile(hook, []byte("#!/bin/sh\necho 'main is protected' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	w := f.writer()
	_, err := w.Write(context.Background(), []pin.Change{f.change("", "web", "web", "1.2.3", "1.3.0")})
	if err == nil || !strings.Contains(err.Error(), "refused the push") || !strings.Contains(err.Error(), "pre-receive hook declined") || !strings.Contains(err.Error(), f.url) {
		t.Errorf("refused push: %v", err)
	}
	if n := f.s.Pushes(repoName); n != 1 {
		t.Errorf("%d pushes: a refused push is not retried", n)
	}
	if got := metric(t, f.reg, "argocd_image_resolver_pin_pushes_total", "outcome", "failed"); got != 1 {
		t.Errorf("pin_pushes_total{failed} %v", got)
	}
	if !strings.Contains(f.log.String(), `"msg":"pin push failed"`) {
		t.Errorf("no log line for the failed push:\n%s", f.log)
	}
}

func TestWriteCreatesBranchWhenAllowed(t *testing.T) {
	f := newFixture(t)
	w := f.writer(pin.WithBranchCreation(true))
	res, err := w.Write(context.Background(), []pin.Change{f.change("pins/prod", "web", "web", "1.2.3", "1.3.0")})
	if err != nil || !res.Pushed || res.Branch != "pins/prod" {
		t.Fatalf("%+v, %v", res, err)
	}
	if got := f.s.Log(t, repoName, "pins/prod"); len(got) != 2 || got[1] != "initial" {
		t.Errorf("pins/prod log %q", got)
	}
	if len(f.s.Log(t, repoName, "main")) != 1 {
		t.Errorf("main moved")
	}
	// and then it exists: the next write goes on top of it
	res, err = w.Write(context.Background(), []pin.Change{f.change("pins/prod", "web", "web", "1.3.0", "1.4.0")})
	if err != nil || !res.Pushed {
		t.Fatalf("%+v, %v", res, err)
	}
	if got := f.s.File(t, repoName, "pins/prod", "apps/web/pins.txt"); got != "web=ghcr.io/org/web:1.4.0\n" {
		t.Errorf("pins.txt %q", got)
	}
	f.s.NoForcePush(t, repoName, "pins/prod")
	f.s.NoForcePush(t, repoName, "main")
}

func TestWriteRetriesWhenAPersonPushesInBetween(t *testing.T) {
	f := newFixture(t)
	w := f.writer()
	ctx := context.Background()

	// another file: re-applied on the person's commit, both kept
	f.s.BeforeReceive(func() {
		f.s.Commit(t, repoName, "main", map[string]string{"README.md": "edited by a person\n"}, "a person's edit")
	})
	res, err := w.Write(ctx, []pin.Change{f.change("", "web", "web", "1.2.3", "1.3.0")})
	if err != nil || !res.Pushed || res.Attempts != 2 || len(res.Applied) != 1 {
		t.Fatalf("%+v, %v", res, err)
	}
	if got := f.s.Log(t, repoName, "main"); !slices.Equal(got, []string{"argocd-image-resolver: web 1.2.3 -> 1.3.0 (web)", "a person's edit", "initial"}) {
		t.Errorf("log %q", got)
	}
	if f.s.File(t, repoName, "main", "README.md") != "edited by a person\n" || f.s.File(t, repoName, "main", "apps/web/pins.txt") != "web=ghcr.io/org/web:1.3.0\n" {
		t.Errorf("files lost")
	}
	if got := metric(t, f.reg, "argocd_image_resolver_pin_pushes_total", "outcome", "rejected"); got != 1 {
		t.Errorf("pin_pushes_total{rejected} %v", got)
	}
	if got := metric(t, f.reg, "argocd_image_resolver_pin_push_retries_total"); got != 1 {
		t.Errorf("pin_push_retries_total %v", got)
	}

	// the same pin: theirs wins, the other app's pin is written
	f.s.BeforeReceive(func() {
		f.s.Commit(t, repoName, "main", map[string]string{"apps/web/pins.txt": "web=ghcr.io/org/web:9.9.9\n"}, "a person pins web")
	})
	res, err = w.Write(ctx, []pin.Change{f.change("", "web", "web", "1.3.0", "1.4.0"), f.change("", "api", "api", "2.0.0", "2.1.0")})
	if err != nil || !res.Pushed || res.Attempts != 2 {
		t.Fatalf("%+v, %v", res, err)
	}
	if len(res.Applied) != 1 || res.Applied[0].Alias != "api" || len(res.Conflicts) != 1 || res.Conflicts[0].Alias != "web" {
		t.Errorf("applied %v, conflicts %v", res.Applied, res.Conflicts)
	}
	if got := f.s.File(t, repoName, "main", "apps/web/pins.txt"); got != "web=ghcr.io/org/web:9.9.9\n" {
		t.Errorf("the person's pin was overwritten: %q", got)
	}
	if got := f.s.Log(t, repoName, "main")[:2]; !slices.Equal(got, []string{"argocd-image-resolver: api 2.0.0 -> 2.1.0 (api)", "a person pins web"}) {
		t.Errorf("log %q", got)
	}
	if got := metric(t, f.reg, "argocd_image_resolver_pin_conflicts_total"); got != 1 {
		t.Errorf("pin_conflicts_total %v", got)
	}
	logs := f.log.String()
	for _, want := range []string{`"msg":"pin conflict`, `"app":"web"`, `"alias":"web"`, `"theirs":"ghcr.io/org/web:9.9.9"`, `"ours":"ghcr.io/org/web:1.4.0"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("conflict log lacks %s:\n%s", want, logs)
		}
	}

	// only that pin: after the person's commit there is nothing left to commit
	f.s.BeforeReceive(func() {
		f.s.Commit(t, repoName, "main", map[string]string{"apps/web/pins.txt": "web=ghcr.io/org/web:9.9.10\n"}, "a person pins web again")
	})
	res, err = w.Write(ctx, []pin.Change{f.change("", "web", "web", "9.9.9", "9.9.11")})
	if err != nil || res.Pushed || len(res.Conflicts) != 1 || res.Attempts != 2 {
		t.Fatalf("%+v, %v", res, err)
	}
	if got := f.s.Log(t, repoName, "main")[0]; got != "a person pins web again" {
		t.Errorf("tip %q", got)
	}
	f.s.NoForcePush(t, repoName, "main")
	f.s.Fsck(t, repoName)
}

func TestWriteGivesUpAfterTheLastAttempt(t *testing.T) {
	f := newFixture(t)
	w := f.writer(pin.WithRetry(3, time.Millisecond))
	for i := range 3 {
		f.s.BeforeReceive(func() {
			f.s.Commit(t, repoName, "main", map[string]string{"README.md": fmt.Sprintf("edit %d\n", i)}, fmt.Sprintf("edit %d", i))
		})
	}
	_, err := w.Write(context.Background(), []pin.Change{f.change("", "web", "web", "1.2.3", "1.3.0")})
	if err == nil || !errors.Is(err, pin.ErrNotPushed) {
		t.Fatalf("err %v", err)
	}
	for _, want := range []string{f.url, "branch main", "after 3 attempts", "rejected", "moved"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	if got := metric(t, f.reg, "argocd_image_resolver_pin_pushes_total", "outcome", "rejected"); got != 3 {
		t.Errorf("pin_pushes_total{rejected} %v", got)
	}
	if got := f.s.Log(t, repoName, "main")[0]; got != "edit 2" {
		t.Errorf("tip %q", got)
	}
	f.s.NoForcePush(t, repoName, "main")
}

func TestTwoWritersRace(t *testing.T) {
	const rounds = 20
	f := newFixture(t)
	apps := []string{"a", "b"}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 2*rounds)
	for _, app := range apps {
		// a writer of its own, as another daemon would be
		w := f.writer(pin.WithRetry(30, 2*time.Millisecond))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				c := f.change("main", app, fmt.Sprintf("r%02d", i), "", fmt.Sprintf("1.0.%d", i))
				res, err := w.Write(context.Background(), []pin.Change{c})
				if err == nil && (!res.Pushed || len(res.Applied) != 1) {
					err = fmt.Errorf("app %s round %d: %+v", app, i, res)
				}
				if err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	elapsed := time.Since(start)

	for _, app := range apps {
		var want strings.Builder
		for i := range rounds {
			fmt.Fprintf(&want, "r%02d=ghcr.io/org/r%02d:1.0.%d\n", i, i, i)
		}
		if got := f.s.File(t, repoName, "main", "apps/"+app+"/pins.txt"); got != want.String() {
			t.Errorf("apps/%s/pins.txt:\n%s\nwant:\n%s", app, got, want.String())
		}
	}
	if n := len(f.s.Log(t, repoName, "main")); n != 2*rounds+1 {
		t.Errorf("%d commits, want %d", n, 2*rounds+1)
	}
	if n := f.s.Merges(t, repoName, "main"); n != 0 {
		t.Errorf("%d merge commits", n)
	}
	f.s.NoForcePush(t, repoName, "main")
	f.s.Fsck(t, repoName)
	t.Logf("2 writers x %d rounds: %v; %v retries, %v rejected pushes, %d pushes served",
		rounds, elapsed.Round(time.Millisecond), metric(t, f.reg, "argocd_image_resolver_pin_push_retries_total"),
		metric(t, f.reg, "argocd_image_resolver_pin_pushes_total", "outcome", "rejected"), f.s.Pushes(repoName))
}

// waitPending waits until w has no pending pins.
func waitPending(t *testing.T, w *pin.Writer) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for w.Pending() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d pins still pending", w.Pending())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestSubmitBatchesOneCommit(t *testing.T) {
	f := newFixture(t)
	w := f.writer(pin.WithBatchWindow(300 * time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		w.Run(ctx)
	}()
	w.Submit(f.change("", "web", "web", "1.2.3", "1.3.0"))
	w.Submit(f.change("", "api", "api", "2.0.0", "2.1.0"))
	w.Submit(f.change("", "worker", "worker", "3.0.0", "3.1.0"))
	// a later change for the same app and alias replaces the queued one
	w.Submit(f.change("", "web", "web", "1.2.3", "1.3.1"))
	if n := w.Pending(); n != 3 {
		t.Errorf("pending %d, want 3", n)
	}
	if got := metric(t, f.reg, "argocd_image_resolver_pins_pending"); got != 3 {
		t.Errorf("pins_pending %v", got)
	}
	waitPending(t, w)
	log := f.s.Log(t, repoName, "main")
	if !slices.Equal(log, []string{"argocd-image-resolver: pin 3 images of 3 apps", "initial"}) {
		t.Errorf("log %q", log)
	}
	for path, want := range map[string]string{
		"apps/web/pins.txt":    "web=ghcr.io/org/web:1.3.1\n",
		"apps/api/pins.txt":    "api=ghcr.io/org/api:2.1.0\n",
		"apps/worker/pins.txt": "worker=ghcr.io/org/worker:3.1.0\n",
	} {
		if got := f.s.File(t, repoName, "main", path); got != want {
			t.Errorf("%s = %q, want %q", path, got, want)
		}
	}
	if got := metric(t, f.reg, "argocd_image_resolver_pins_pending"); got != 0 {
		t.Errorf("pins_pending %v", got)
	}

	// what is queued when Run stops is written before it returns
	w2 := f.writer(pin.WithBatchWindow(time.Hour))
	ctx2, cancel2 := context.WithCancel(context.Background())
	stopped2 := make(chan struct{})
	go func() {
		defer close(stopped2)
		w2.Run(ctx2)
	}()
	w2.Submit(f.change("", "web", "web", "1.3.1", "1.3.2"))
	time.Sleep(20 * time.Millisecond)
	if len(f.s.Log(t, repoName, "main")) != 2 {
		t.Errorf("written before its window")
	}
	cancel2()
	select {
	case <-stopped2:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	if got := f.s.File(t, repoName, "main", "apps/web/pins.txt"); got != "web=ghcr.io/org/web:1.3.2\n" || w2.Pending() != 0 {
		t.Errorf("not flushed on stop: %q, %d pending", got, w2.Pending())
	}

	cancel()
	<-stopped
	f.s.NoForcePush(t, repoName, "main")
}

func TestSubmitRequeuesAFailedBatch(t *testing.T) {
	f := newFixture(t)
	w := f.writer(pin.WithBatchWindow(10*time.Millisecond), pin.WithRetry(1, time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)
	// the branch does not exist yet: the batch fails, is queued again, and is
	// written once a person creates the branch
	w.Submit(f.change("pins", "web", "web", "1.2.3", "1.3.0"))
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(f.log.String(), "pins queued again") {
		if time.Now().After(deadline) {
			t.Fatalf("no requeue:\n%s", f.log)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if w.Pending() != 1 {
		t.Errorf("pending %d", w.Pending())
	}
	f.s.Branch(t, repoName, "pins", "main")
	waitPending(t, w)
	if got := f.s.File(t, repoName, "pins", "apps/web/pins.txt"); got != "web=ghcr.io/org/web:1.3.0\n" {
		t.Errorf("pins.txt %q", got)
	}
}

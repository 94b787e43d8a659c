package forge

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/pin/forge/giteatest"
)

// giteaObserved records Observe's calls.
type giteaObserved struct {
	mu    sync.Mutex
	calls []string // "op status"
}

func (o *giteaObserved) add(op string, status int) {
	o.mu.Lock()
	o.calls = append(o.calls, fmt.Sprintf("%s %d", op, status))
	o.mu.Unlock()
}

func (o *giteaObserved) get() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.calls...)
}

// newGiteaTestForge is a Forge of kind gitea on api with token, its requests
// observed into obs.
func newGiteaTestForge(t *testing.T, api, token string, obs *giteaObserved) *gitea {
	t.Helper()
	f, err := New(Config{
		Kind: KindGitea, API: api,
		Token:   func(context.Context) (string, error) { return token, nil },
		Observe: obs.add,
	})
	if err != nil {
		t.Fatal(err)
	}
	return f.(*gitea)
}

// requestLines are the proxy's requests as "METHOD PATH?QUERY -> STATUS".
func requestLines(p *giteatest.Proxy) []string {
	var out []string
	for _, r := range p.Requests() {
		out = append(out, r.String())
	}
	return out
}

// TestGitea runs the gitea Forge against a real Gitea: one for all the
// subtests, and one repository for those that only open pull requests (each
// from branches of its own; "changed" is one commit ahead of main, and a
// branch made from it costs no commit).
func TestGitea(t *testing.T) {
	g := giteatest.Start(t)
	repo := g.CreateRepo(t, "forge", map[string]string{"apps/a.yaml": "tag: v1\n"})
	g.CreateBranch(t, repo, "changed", "main", map[string]string{"apps/a.yaml": "tag: v2\n"})
	for _, l := range []string{"pins", "automated", "unrelated"} {
		g.CreateLabel(t, repo, l)
	}
	for _, u := range []string{"alice", "bob"} {
		g.CreateUser(t, u)
		g.AddCollaborator(t, repo, u)
	}
	g.CreateBranches(t, repo, "changed", "pins/x", "pins/u", "pins/dup")
	t.Run("OpenPullRequestsEveryPage", func(t *testing.T) { testGiteaList(t, g) })
	t.Run("CreateWithLabelsAssigneesReviewersAutoMerge", func(t *testing.T) { testGiteaCreate(t, g, repo) })
	t.Run("CreateUnknownLabel", func(t *testing.T) { testGiteaUnknownLabel(t, g, repo) })
	t.Run("Update", func(t *testing.T) { testGiteaUpdate(t, g, repo) })
	t.Run("Refusals", func(t *testing.T) { testGiteaRefusals(t, g, repo) })
	t.Run("ProtectedBranchPushRefused", func(t *testing.T) { testGiteaProtectedPush(t, g) })
}

// Four open pull requests at one a page take four list requests; only the
// two whose head is a pins/ branch of the repository itself are kept (not
// another branch, not a fork's pins/b).
func testGiteaList(t *testing.T, g *giteatest.Gitea) {
	repo := g.CreateRepo(t, "list", map[string]string{"apps/a.yaml": "tag: v1\n"})
	g.CreateBranch(t, repo, "pins/a", "main", map[string]string{"apps/a.yaml": "tag: v2\n"})
	g.CreateBranches(t, repo, "pins/a", "pins/b", "other")
	want := map[int]PullRequest{}
	for _, b := range []string{"pins/a", "other", "pins/b"} {
		n := g.OpenPullRequest(t, repo, b, "main", "Pin "+b)
		if b != "other" {
			want[n] = PullRequest{Number: n, Head: b, Base: "main", HeadSHA: g.BranchSHA(t, repo, b), Title: "Pin " + b, State: StateOpen}
		}
	}
	// A fork (with every branch) proposes its pins/b to repo.
	g.API(t, http.MethodPost, "/orgs", map[string]any{"username": "forkers"}, nil)
	var fork struct {
		FullName string `json:"full_name"`
	}
	g.API(t, http.MethodPost, "/repos/"+repo+"/forks", map[string]any{"organization": "forkers"}, &fork)
	g.OpenPullRequest(t, repo, "forkers:pins/b", "main", "from a fork")

	p := g.Proxy(t)
	obs := &giteaObserved{}
	f := newGiteaTestForge(t, p.URL, g.Token, obs)
	f.pageSize = 1
	got, err := f.OpenPullRequests(t.Context(), repo, "pins/")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("got %d pull requests, want %d: %+v", len(got), len(want), got)
	}
	for _, pr := range got {
		w, ok := want[pr.Number]
		if !ok || !strings.HasSuffix(pr.URL, fmt.Sprintf("/%s/pulls/%d", repo, pr.Number)) {
			t.Errorf("unexpected %+v", pr)
			continue
		}
		w.URL, w.Body = pr.URL, pr.Body
		if pr != w {
			t.Errorf("got %+v\nwant %+v", pr, w)
		}
	}
	path := "/api/v1/repos/" + repo + "/pulls"
	wantReqs := []string{}
	for page := 1; page <= 4; page++ {
		wantReqs = append(wantReqs, fmt.Sprintf("GET %s?limit=1&page=%d&state=open -> 200", path, page))
	}
	if lines := requestLines(p); !slices.Equal(lines, wantReqs) {
		t.Fatalf("requests:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(wantReqs, "\n"))
	}
	if calls := obs.get(); !slices.Equal(calls, slices.Repeat([]string{"list pull requests 200"}, 4)) {
		t.Fatalf("observed %q", calls)
	}

	// At Gitea's own page size, one request.
	p.Reset()
	f.pageSize = giteaPageSize
	if got, err := f.OpenPullRequests(t.Context(), repo, "pins/"); err != nil || len(got) != len(want) {
		t.Fatalf("at 50 a page: %d pull requests, %v", len(got), err)
	}
	if n := len(p.Requests()); n != 1 {
		t.Fatalf("at 50 a page: %d requests:\n%s", n, p.Summary())
	}
}

// Create opens the pull request with its labels (looked up in one listing),
// assignee and reviewer, and schedules auto-merge, which Gitea then does (no
// checks to wait for): exactly four requests.
func testGiteaCreate(t *testing.T, g *giteatest.Gitea, repo string) {
	// A commit of its own: merging it leaves the other subtests' branches ahead of main.
	g.CreateBranch(t, repo, "pins/app", "main", map[string]string{"apps/b.yaml": "tag: v2\n"})
	p := g.Proxy(t)
	obs := &giteaObserved{}
	f := newGiteaTestForge(t, p.URL, g.Token, obs)
	spec := Spec{Head: "pins/app", Base: "main", Title: "Pin app to v2", Body: "resolved v2",
		Labels: []string{"automated", "pins"}, Assignees: []string{"alice"}, Reviewers: []string{"bob"}, AutoMerge: true}
	pr, err := f.Create(t.Context(), repo, spec)
	if err != nil {
		t.Fatalf("%v\nrequests:\n%s", err, p.Summary())
	}
	want := PullRequest{Number: pr.Number, URL: pr.URL, Head: "pins/app", Base: "main", HeadSHA: g.BranchSHA(t, repo, "pins/app"),
		Title: spec.Title, Body: spec.Body, State: StateOpen}
	if pr.Number < 1 || pr != want {
		t.Fatalf("Create = %+v, want %+v", pr, want)
	}
	base := "/api/v1/repos/" + repo
	wantReqs := []string{
		"GET " + base + "/labels?limit=50&page=1 -> 200",
		"POST " + base + "/pulls -> 201",
		fmt.Sprintf("POST %s/pulls/%d/requested_reviewers -> 201", base, pr.Number),
		fmt.Sprintf("POST %s/pulls/%d/merge -> 201", base, pr.Number),
	}
	if lines := requestLines(p); !slices.Equal(lines, wantReqs) {
		t.Fatalf("requests:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(wantReqs, "\n"))
	}
	wantObs := []string{"list labels 200", "create pull request 201", "request reviewers 201", "enable auto-merge 201"}
	if calls := obs.get(); !slices.Equal(calls, wantObs) {
		t.Fatalf("observed %q, want %q", calls, wantObs)
	}
	got := g.PullRequest(t, repo, pr.Number)
	slices.Sort(got.Labels)
	if !slices.Equal(got.Labels, []string{"automated", "pins"}) || !slices.Equal(got.Assignees, []string{"alice"}) ||
		!slices.Equal(got.Reviewers, []string{"bob"}) {
		t.Fatalf("on Gitea: labels %q assignees %q reviewers %q", got.Labels, got.Assignees, got.Reviewers)
	}
	g.WaitPullRequest(t, repo, pr.Number, "merged by auto-merge", func(p giteatest.PullRequest) bool { return p.Merged })
}

// A label the repository lacks is named, with those it has, before anything
// is opened.
func testGiteaUnknownLabel(t *testing.T, g *giteatest.Gitea, repo string) {
	p := g.Proxy(t)
	f := newGiteaTestForge(t, p.URL, g.Token, &giteaObserved{})
	_, err := f.Create(t.Context(), repo, Spec{Head: "pins/x", Base: "main", Title: "x", Labels: []string{"pins", "nope"}})
	if err == nil || !strings.Contains(err.Error(), `label "nope"`) || !strings.Contains(err.Error(), `"automated", "pins", "unrelated"`) {
		t.Fatalf("err = %v, want one naming label \"nope\" and the repository's labels", err)
	}
	if n := len(p.Requests()); n != 1 {
		t.Fatalf("%d requests, want only the label listing:\n%s", n, p.Summary())
	}
	for _, pr := range g.PullRequests(t, repo, "all") {
		if pr.Head == "pins/x" {
			t.Fatalf("a pull request was opened: %+v", pr)
		}
	}
}

// Update sets title and body, in one request.
func testGiteaUpdate(t *testing.T, g *giteatest.Gitea, repo string) {
	n := g.OpenPullRequest(t, repo, "pins/u", "main", "old title")
	p := g.Proxy(t)
	f := newGiteaTestForge(t, p.URL, g.Token, &giteaObserved{})
	pr, err := f.Update(t.Context(), repo, n, Spec{Title: "new title", Body: "new body"})
	if err != nil {
		t.Fatal(err)
	}
	if pr.Number != n || pr.Title != "new title" || pr.Body != "new body" || pr.State != StateOpen || pr.Head != "pins/u" {
		t.Fatalf("Update = %+v", pr)
	}
	if got := g.PullRequest(t, repo, n); got.Title != "new title" || got.Body != "new body" {
		t.Fatalf("on Gitea: %+v", got)
	}
	want := []string{fmt.Sprintf("PATCH /api/v1/repos/%s/pulls/%d -> 201", repo, n)}
	if lines := requestLines(p); !slices.Equal(lines, want) {
		t.Fatalf("requests %q, want %q", lines, want)
	}
}

// Gitea's refusals: each an *Error with its sentinel, Gitea's message, not
// retryable, and no token in it.
func testGiteaRefusals(t *testing.T, g *giteatest.Gitea, repo string) {
	g.OpenPullRequest(t, repo, "pins/dup", "main", "first")
	const wrongToken = "0123456789abcdef0123456789abcdef01234567"
	for _, tc := range []struct {
		name, token string
		call        func(f *gitea) error
		status      int
		sentinel    error
		detail      string
	}{
		{"wrong token", wrongToken, func(f *gitea) error {
			_, err := f.OpenPullRequests(t.Context(), repo, "pins/")
			return err
		}, 401, ErrUnauthorized, "token"},
		{"missing repository", g.Token, func(f *gitea) error {
			_, err := f.OpenPullRequests(t.Context(), g.User+"/no-such-repo", "pins/")
			return err
		}, 404, ErrNotFound, ""},
		{"duplicate pull request", g.Token, func(f *gitea) error {
			_, err := f.Create(t.Context(), repo, Spec{Head: "pins/dup", Base: "main", Title: "again"})
			return err
		}, 409, ErrInvalid, "already exists"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newGiteaTestForge(t, g.URL, tc.token, &giteaObserved{})
			err := tc.call(f)
			var fe *Error
			if !errors.As(err, &fe) || !errors.Is(err, tc.sentinel) || fe.Status != tc.status {
				t.Fatalf("err = %v, want an *Error, HTTP %d, %v", err, tc.status, tc.sentinel)
			}
			if !strings.Contains(fe.Detail, tc.detail) || fe.Detail == "" || Retryable(err) {
				t.Fatalf("detail %q (want %q in it), retryable %v", fe.Detail, tc.detail, Retryable(err))
			}
			for _, secret := range []string{g.Token, wrongToken, g.Password} {
				if strings.Contains(err.Error(), secret) || strings.Contains(fmt.Sprintf("%+v %#v", err, fe), secret) {
					t.Fatalf("a credential is in the error: %v", err)
				}
			}
			t.Logf("%v", err)
		})
	}
}

// TestGiteaAnswers covers what a real Gitea cannot be made to answer (a rate
// limit, a server error, an answer too large, no answer in time) with an HTTP
// server answering as Gitea's API would.
func TestGiteaAnswers(t *testing.T) {
	const token = "s3cr3t-token-value"
	for _, tc := range []struct {
		name       string
		handler    http.HandlerFunc
		limit      int64
		status     int
		sentinel   error
		retryable  bool
		retryAfter time.Duration
		detail     string
	}{
		{name: "rate limited", handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(http.StatusTooManyRequests)
			fmt.Fprint(w, `{"message":"too many requests","url":"x"}`)
		}, status: 429, sentinel: ErrRateLimited, retryable: true, retryAfter: 7 * time.Second, detail: "too many requests"},
		{name: "forbidden, echoing the token", handler: func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprintf(w, `{"message":"token does not have scope write:repository: %s"}`, r.Header.Get("Authorization"))
		}, status: 403, sentinel: ErrForbidden, detail: "token [token]"},
		{name: "unprocessable", handler: func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusUnprocessableEntity)
			fmt.Fprint(w, `{"message":"Invalid PullRequest","errors":["head is required"]}`)
		}, status: 422, sentinel: ErrInvalid, detail: "Invalid PullRequest (head is required)"},
		{name: "server error, not JSON", handler: func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "upstream broke", http.StatusBadGateway)
		}, status: 502, retryable: true, detail: "upstream broke"},
		{name: "answer too large", handler: func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprint(w, "["+strings.Repeat(" ", 4096)+"]")
		}, limit: 1024, status: 200, detail: "larger than 1024 bytes"},
		{name: "no answer in time", handler: func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		}, status: 0, retryable: true, detail: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newGiteaAnswerServer(t, tc.handler)
			obs := &giteaObserved{}
			f, err := New(Config{Kind: KindGitea, API: srv, Timeout: 300 * time.Millisecond, Observe: obs.add,
				Token: func(context.Context) (string, error) { return token, nil }})
			if err != nil {
				t.Fatal(err)
			}
			if tc.limit > 0 {
				f.(*gitea).http.tr.limit = tc.limit
			}
			t0 := time.Now()
			_, err = f.OpenPullRequests(t.Context(), "o/r", "pins/")
			var fe *Error
			if !errors.As(err, &fe) || fe.Status != tc.status || (tc.sentinel != nil && !errors.Is(err, tc.sentinel)) {
				t.Fatalf("err = %v, want HTTP %d %v", err, tc.status, tc.sentinel)
			}
			if Retryable(err) != tc.retryable || RetryAfter(err) != tc.retryAfter || !strings.Contains(fe.Detail, tc.detail) {
				t.Fatalf("retryable %v after %s, detail %q; want %v after %s, %q", Retryable(err), RetryAfter(err), fe.Detail, tc.retryable, tc.retryAfter, tc.detail)
			}
			if strings.Contains(err.Error(), token) {
				t.Fatalf("token in %v", err)
			}
			if d := time.Since(t0); d > 3*time.Second {
				t.Fatalf("took %s with a 300ms timeout", d)
			}
			if calls := obs.get(); !slices.Equal(calls, []string{fmt.Sprintf("list pull requests %d", tc.status)}) {
				t.Fatalf("observed %q", calls)
			}
			t.Logf("%v", err)
		})
	}
}

// TestGiteaBadInput: every input the forge would refuse is refused before a
// request, naming the input and what is accepted.
func TestGiteaBadInput(t *testing.T) {
	tok := func(context.Context) (string, error) { return "t", nil }
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"api not a URL", Config{Kind: KindGitea, API: "gitea.example", Token: tok}, `api "gitea.example": want the server's URL`},
		{"api ftp", Config{Kind: KindGitea, API: "ftp://gitea.example", Token: tok}, `api "ftp://gitea.example"`},
		{"no token", Config{Kind: KindGitea, API: "https://gitea.example"}, "no token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v, want %q", err, tc.want)
			}
		})
	}
	srv := newGiteaAnswerServer(t, func(w http.ResponseWriter, r *http.Request) { t.Errorf("request %s %s", r.Method, r.URL) })
	f, err := New(Config{Kind: KindGitea, API: srv, Token: tok})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	good := Spec{Head: "pins/a", Base: "main", Title: "t"}
	for _, tc := range []struct {
		name string
		call func() error
		want string
	}{
		{"repo without owner", func() error { _, err := f.OpenPullRequests(ctx, "repo", ""); return err }, `repository "repo": want owner/name`},
		{"repo with subgroup", func() error { _, err := f.Create(ctx, "a/b/c", good); return err }, `repository "a/b/c": want owner/name`},
		{"no title", func() error { _, err := f.Create(ctx, "o/r", Spec{Head: "h", Base: "main", Title: " "}); return err }, `title " ": want a title`},
		{"no head", func() error { _, err := f.Create(ctx, "o/r", Spec{Base: "main", Title: "t"}); return err }, `head/base "/main": want both`},
		{"head is base", func() error { _, err := f.Create(ctx, "o/r", Spec{Head: "main", Base: "main", Title: "t"}); return err }, `head "main": want a branch other than the base`},
		{"number 0", func() error { _, err := f.Update(ctx, "o/r", 0, good); return err }, "number 0 of o/r: want a number of 1 or more"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

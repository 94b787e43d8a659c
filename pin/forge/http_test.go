package forge

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// rawServer is an HTTP server answering every request with h, counting them.
func rawServer(t *testing.T, h http.HandlerFunc) (*httptest.Server, *atomic.Int64) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		h(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

// TestBounds: an answer that never comes ends at Config.Timeout as "no
// answer" (retryable); one larger than MaxAnswerBytes is refused (not
// retryable); each after exactly one request, observed once.
func TestBounds(t *testing.T) {
	hang := func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }
	huge := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte("["))
		chunk := []byte(strings.Repeat(" ", 1<<20))
		for range MaxAnswerBytes>>20 + 1 {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
		w.Write([]byte("]"))
	}
	cases := []struct {
		name      string
		handler   http.HandlerFunc
		timeout   time.Duration
		status    int
		retryable bool
		message   string
	}{
		{name: "timeout", handler: hang, timeout: 300 * time.Millisecond, status: 0, retryable: true, message: ": no answer in time: "},
		{name: "too large", handler: huge, timeout: time.Minute, status: 200, retryable: false, message: "answer larger than 8388608 bytes"},
	}
	for _, kind := range []string{KindGitHub, KindGitLab} {
		for _, tc := range cases {
			t.Run(kind+"/"+tc.name, func(t *testing.T) {
				srv, n := rawServer(t, tc.handler)
				obs := &observer{}
				f := mustNew(t, Config{Kind: kind, API: srv.URL, Token: staticToken("s3cret-token"), Timeout: tc.timeout, Observe: obs.observe})
				_, err := f.OpenPullRequests(context.Background(), "group/app", "")
				var fe *Error
				if !errors.As(err, &fe) {
					t.Fatalf("err = %v, want an *Error", err)
				}
				if fe.Status != tc.status || Retryable(err) != tc.retryable || !strings.Contains(err.Error(), tc.message) {
					t.Fatalf("err = %v (status %d, retryable %v), want status %d, retryable %v, %q", err, fe.Status, Retryable(err), tc.status, tc.retryable, tc.message)
				}
				checkNoToken(t, err, "s3cret-token")
				if n.Load() != 1 {
					t.Errorf("%d requests, want 1 (no retry)", n.Load())
				}
				if got := obs.all(); len(got) != 1 || got[0] != (observed{OpList, tc.status}) {
					t.Errorf("observed %v, want [{%s %d}]", got, OpList, tc.status)
				}
			})
		}
	}
}

// TestCredentialOnlyToTheAPI: the token goes to the API's origin only.
func TestCredentialOnlyToTheAPI(t *testing.T) {
	var seen atomic.Value
	record := func(w http.ResponseWriter, r *http.Request) {
		seen.Store(r.Header.Get("Authorization") + r.Header.Get("PRIVATE-TOKEN"))
	}
	api, _ := rawServer(t, record)
	other, _ := rawServer(t, record)
	u, _ := url.Parse(api.URL)
	client := newHTTPClient(Config{Timeout: time.Second}, u, tokenCredential(KindGitHub, staticToken("s3cret"), "Authorization", "Bearer "))
	for target, want := range map[string]string{api.URL: "Bearer s3cret", other.URL: ""} {
		resp, err := client.Get(target + "/x")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := seen.Load(); got != want {
			t.Errorf("%s got credential %q, want %q", target, got, want)
		}
	}
}

// TestBadInput: what cannot be asked is refused before any request, named
// with its value and what is accepted.
func TestBadInput(t *testing.T) {
	srv, n := rawServer(t, func(w http.ResponseWriter, r *http.Request) {})
	gh := mustNew(t, Config{Kind: KindGitHub, API: srv.URL, Token: staticToken("t")})
	gl := mustNew(t, Config{Kind: KindGitLab, API: srv.URL, Token: staticToken("t")})
	ctx := context.Background()
	spec := Spec{Head: "image-resolver/web", Base: "main", Title: "Pin"}
	cases := []struct {
		name string
		call func() error
		want string
	}{
		{"github repo without owner", func() error { _, err := gh.OpenPullRequests(ctx, "app", ""); return err }, `repository "app": want owner/name`},
		{"github repo too deep", func() error { _, err := gh.Create(ctx, "a/b/c", spec); return err }, `repository "a/b/c": want owner/name`},
		{"gitlab repo without group", func() error { _, err := gl.OpenPullRequests(ctx, "app", ""); return err }, `repository "app": want the project path group[/subgroup]/name`},
		{"gitlab repo with empty part", func() error { _, err := gl.Update(ctx, "a//b", 1, spec); return err }, `repository "a//b"`},
		{"no title", func() error { _, err := gh.Create(ctx, "o/r", Spec{Head: "h", Base: "b"}); return err }, "the title is empty"},
		{"head is base", func() error {
			_, err := gl.Create(ctx, "g/r", Spec{Head: "main", Base: "main", Title: "t"})
			return err
		}, `head and base are both "main"`},
		{"number 0", func() error { _, err := gh.Update(ctx, "o/r", 0, spec); return err }, "number 0: want a pull request number (1 or more)"},
		{"gitlab number -1", func() error { _, err := gl.Update(ctx, "g/r", -1, spec); return err }, "number -1: want a merge request iid (1 or more)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrInvalid) || Retryable(err) {
				t.Errorf("err = %v, want ErrInvalid saying %q, not retryable", err, tc.want)
			}
		})
	}
	if n.Load() != 0 {
		t.Errorf("%d requests sent for bad input, want 0", n.Load())
	}
}

// TestBadConfig: New refuses what cannot reach a forge, naming it.
func TestBadConfig(t *testing.T) {
	cases := []struct {
		cfg  Config
		want string
	}{
		{Config{Kind: KindGitHub, API: "ftp://host", Token: staticToken("t")}, `api "ftp://host": not an http(s) URL`},
		{Config{Kind: KindGitLab, API: "gitlab.example", Token: staticToken("t")}, `api "gitlab.example"`},
		{Config{Kind: KindGitHub, API: "https://user:pw@ghe.example/api/v3", Token: staticToken("t")}, "credentials in the URL are not accepted"},
		{Config{Kind: KindGitLab, API: "https://gitlab.example", GitHubApp: &GitHubApp{AppID: 1}}, "a GitHub App is for GitHub only"},
		{Config{Kind: KindGitHub, API: "https://api.github.com", GitHubApp: &GitHubApp{AppID: 1}}, "want an App ID, an installation ID"},
	}
	for _, tc := range cases {
		_, err := New(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want %q", tc.cfg, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "pw@") {
			t.Errorf("the error shows the URL's password: %v", err)
		}
	}
}

// TestTokenRead: the token is read at each request (a rotated token is
// used), and one no header can carry is refused without being shown.
func TestTokenRead(t *testing.T) {
	var got atomic.Value
	srv, _ := rawServer(t, func(w http.ResponseWriter, r *http.Request) {
		got.Store(r.Header.Get("PRIVATE-TOKEN"))
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte("[]"))
	})
	var tok atomic.Value
	tok.Store("first")
	f := mustNew(t, Config{Kind: KindGitLab, API: srv.URL, Token: func(context.Context) (string, error) { return tok.Load().(string), nil }})
	for _, want := range []string{"first", "second"} {
		tok.Store(want + "\n") // as read from a file
		if _, err := f.OpenPullRequests(context.Background(), "g/r", ""); err != nil {
			t.Fatal(err)
		}
		if got.Load() != want {
			t.Errorf("sent %q, want %q", got.Load(), want)
		}
	}
	tok.Store("line1\nline2-secret")
	_, err := f.OpenPullRequests(context.Background(), "g/r", "")
	if err == nil || !strings.Contains(err.Error(), "holds a line break") {
		t.Fatalf("err = %v, want the token refused", err)
	}
	checkNoToken(t, err, "line2-secret")
}

// TestClassify maps statuses and headers as the forges document them.
func TestClassify(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	cases := []struct {
		name     string
		status   int
		header   http.Header
		body     string
		sentinel error
		wait     time.Duration
	}{
		{"github primary 403", 403, http.Header{"X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {"1700000042"}}, "", ErrRateLimited, 42 * time.Second},
		{"github primary 429", 429, http.Header{"X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {"1700000010"}}, "", ErrRateLimited, 10 * time.Second},
		{"github reset passed", 403, http.Header{"X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {"1699999990"}}, "", ErrRateLimited, 0},
		{"github secondary", 403, http.Header{"Retry-After": {"60"}}, "", ErrRateLimited, time.Minute},
		{"github 403 remaining left", 403, http.Header{"X-Ratelimit-Remaining": {"4999"}}, `{"message":"Must have admin rights"}`, ErrForbidden, 0},
		{"retry-after date", 429, http.Header{"Retry-After": {now.Add(90 * time.Second).UTC().Format(http.TimeFormat)}}, "", ErrRateLimited, 90 * time.Second},
		{"gitlab 429 reset only", 429, http.Header{"Ratelimit-Remaining": {"0"}, "Ratelimit-Reset": {"1700000030"}}, "", ErrRateLimited, 30 * time.Second},
		{"gitlab 429 bare", 429, nil, "Retry later", ErrRateLimited, 0},
		{"gitlab 429 remaining left", 429, http.Header{"Ratelimit-Remaining": {"595"}, "Ratelimit-Reset": {"1700000060"}}, "", ErrRateLimited, time.Minute},
		{"gitlab 409", 409, nil, "", ErrInvalid, 0},
		{"gitlab 405", 405, nil, "", ErrInvalid, 0},
		{"503 retry-after", 503, http.Header{"Retry-After": {"5"}}, "", errFailed, 5 * time.Second},
		{"418", 418, nil, "", errRefused, 0},
	}
	for _, tc := range cases {
		sentinel, wait := classify(tc.status, tc.header, []byte(tc.body), now)
		if sentinel != tc.sentinel || wait != tc.wait {
			t.Errorf("%s: classify = %v, %s; want %v, %s", tc.name, sentinel, wait, tc.sentinel, tc.wait)
		}
	}
}

// TestRefusalDetail keeps the forges' messages in their documented shapes.
func TestRefusalDetail(t *testing.T) {
	cases := map[string]string{
		`{"message":"Validation Failed","errors":[{"resource":"PullRequest","code":"custom","message":"A pull request already exists for o:b."}]}`: "Validation Failed: A pull request already exists for o:b.",
		`{"message":"Validation Failed","errors":[{"resource":"PullRequest","field":"head","code":"invalid"}]}`:                                    "Validation Failed: PullRequest head invalid",
		`{"message":["Another open merge request already exists for this source branch: !1"]}`:                                                     "Another open merge request already exists for this source branch: !1",
		`{"message":{"title":["can't be blank"],"labels":["is too long"]}}`:                                                                        "labels is too long; title can't be blank",
		`{"error":"title is missing"}`:            "title is missing",
		"Retry later\n":                           "Retry later",
		`<html><body>Bad   gateway</body></html>`: `<html><body>Bad gateway</body></html>`,
	}
	for body, want := range cases {
		if got := refusalDetail([]byte(body)); got != want {
			t.Errorf("refusalDetail(%s) = %q, want %q", body, got, want)
		}
	}
	long := bound(strings.Repeat("é", maxDetail))
	if len(long) > maxDetail+len("…") || !strings.HasSuffix(long, "…") || !strings.HasPrefix(long, "éé") {
		t.Errorf("bound: %d bytes, want at most %d, cut on a rune", len(long), maxDetail)
	}
}

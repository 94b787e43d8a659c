package forge

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/pin/forge/forgetest"
)

// TestRefusals maps each refusal the forges document to its sentinel,
// Retryable and RetryAfter, with the forge's message kept and the token
// never shown; each with exactly one request (the client never retries).
func TestRefusals(t *testing.T) {
	list := func(fx *fixture) error {
		_, err := fx.forge.OpenPullRequests(context.Background(), fx.repo, "image-resolver/")
		return err
	}
	cases := []struct {
		name      string
		kinds     []string // empty: both
		inject    func(fx *fixture) forgetest.Failure
		op        func(fx *fixture) error
		route     string // fixture operation whose requests are counted
		requests  int
		sentinel  error // nil: none of them
		status    int
		retryable bool
		// retryAfter is expected within [min, max].
		retryMin, retryMax time.Duration
		detail             map[string]string // kind -> substring of Detail
	}{
		{
			name: "401 bad credentials", inject: func(fx *fixture) forgetest.Failure { return fx.refusal(401) },
			sentinel: ErrUnauthorized, status: 401,
			detail: map[string]string{KindGitHub: "Bad credentials", KindGitLab: "401 Unauthorized"},
		},
		{
			name: "403 forbidden", inject: func(fx *fixture) forgetest.Failure { return fx.refusal(403) },
			sentinel: ErrForbidden, status: 403,
			detail: map[string]string{KindGitHub: "Resource not accessible by integration", KindGitLab: "403 Forbidden"},
		},
		{
			name: "404 not found", inject: func(fx *fixture) forgetest.Failure { return fx.refusal(404) },
			sentinel: ErrNotFound, status: 404,
			detail: map[string]string{KindGitHub: "Not Found", KindGitLab: "404 Project Not Found"},
		},
		{
			name: "validation", inject: func(fx *fixture) forgetest.Failure { return fx.validation("is invalid") },
			sentinel: ErrInvalid, status: 422,
			detail: map[string]string{KindGitHub: "Validation Failed: is invalid", KindGitLab: "source_branch is invalid"},
		},
		{
			name: "rate limit until reset", inject: func(fx *fixture) forgetest.Failure { return fx.rateLimit(0, 90*time.Second) },
			sentinel: ErrRateLimited, retryable: true, retryMin: 88 * time.Second, retryMax: 91 * time.Second,
			detail: map[string]string{KindGitHub: "API rate limit exceeded", KindGitLab: "Retry later"},
		},
		{
			name: "rate limit with Retry-After", inject: func(fx *fixture) forgetest.Failure { return fx.rateLimit(30*time.Second, 90*time.Second) },
			sentinel: ErrRateLimited, status: 429, retryable: true, retryMin: 30 * time.Second, retryMax: 30 * time.Second,
			detail: map[string]string{KindGitHub: "secondary rate limit", KindGitLab: "Retry later"},
		},
		{
			name: "server error", inject: func(fx *fixture) forgetest.Failure { return fx.refusal(502) },
			status: 502, retryable: true,
			detail: map[string]string{KindGitHub: "Bad Gateway", KindGitLab: "502 Bad Gateway"},
		},
	}
	for _, newFixture := range fixtures {
		for _, tc := range cases {
			fx := newFixture(t)
			t.Run(fx.kind+"/"+tc.name, func(t *testing.T) {
				fx.fail(fx.routes[fxList], 3, tc.inject(fx))
				err := list(fx)
				checkRefusal(t, fx, err, tc.sentinel, tc.retryable, tc.retryMin, tc.retryMax, tc.detail[fx.kind])
				var fe *Error
				errors.As(err, &fe)
				if want := wantStatus(fx, tc.name, tc.status); fe.Status != want {
					t.Errorf("Status = %d, want %d", fe.Status, want)
				}
				if got := fx.count(fx.routes[fxList]); got != 1 {
					t.Errorf("%d list requests, want 1 (no retry)", got)
				}
				if fe.Op != OpList || fe.Repo != fx.repo || fe.Kind != fx.kind {
					t.Errorf("error names %s %s of %s, want %s %s of %s", fe.Kind, fe.Op, fe.Repo, fx.kind, OpList, fx.repo)
				}
				fx.checkObserved(t)
			})
		}
	}
}

// wantStatus is the status a case answers on fx's forge.
func wantStatus(fx *fixture, name string, status int) int {
	switch {
	case name == "validation" && fx.kind == KindGitLab:
		return 400
	case name == "rate limit until reset" && fx.kind == KindGitHub:
		return 403
	case name == "rate limit until reset":
		return 429
	}
	return status
}

func checkRefusal(t *testing.T, fx *fixture, err, sentinel error, retryable bool, retryMin, retryMax time.Duration, detail string) {
	t.Helper()
	if err == nil {
		t.Fatal("no error")
	}
	checkNoToken(t, err, fx.token)
	var fe *Error
	if !errors.As(err, &fe) {
		t.Fatalf("%T %v: not an *Error", err, err)
	}
	for _, s := range []error{ErrUnauthorized, ErrForbidden, ErrNotFound, ErrInvalid, ErrRateLimited} {
		if got := errors.Is(err, s); got != (s == sentinel) {
			t.Errorf("errors.Is(%v, %q) = %v", err, s, got)
		}
	}
	if Retryable(err) != retryable {
		t.Errorf("Retryable(%v) = %v, want %v", err, !retryable, retryable)
	}
	if d := RetryAfter(err); d < retryMin || d > retryMax {
		t.Errorf("RetryAfter = %s, want in [%s, %s]", d, retryMin, retryMax)
	}
	if !strings.Contains(fe.Detail, detail) || !strings.Contains(err.Error(), detail) {
		t.Errorf("error %q (Detail %q) does not carry the forge's message %q", err, fe.Detail, detail)
	}
}

// TestCreateRefusals: a second pull request for the same head is refused
// as invalid with the forge's message; a wrong token is refused, and
// neither token shows.
func TestCreateRefusals(t *testing.T) {
	spec := Spec{Head: "image-resolver/web", Base: "main", Title: "Pin web"}
	for _, newFixture := range fixtures {
		fx := newFixture(t)
		t.Run(fx.kind+"/exists", func(t *testing.T) {
			ctx := context.Background()
			if _, err := fx.forge.Create(ctx, fx.repo, spec); err != nil {
				t.Fatal(err)
			}
			_, err := fx.forge.Create(ctx, fx.repo, spec)
			want := map[string]string{
				KindGitHub: "Validation Failed: A pull request already exists for octo:image-resolver/web.",
				KindGitLab: "Another open merge request already exists for this source branch: !1",
			}[fx.kind]
			checkRefusal(t, fx, err, ErrInvalid, false, 0, 0, want)
			if got := fx.count(fx.routes[fxCreate]); got != 2 {
				t.Errorf("%d create requests, want 2", got)
			}
		})
		t.Run(fx.kind+"/wrong token", func(t *testing.T) {
			wrong := "wrong-" + fx.token
			f := mustNew(t, Config{Kind: fx.kind, API: fx.api, Token: staticToken(wrong)})
			_, err := f.Create(context.Background(), fx.repo, spec)
			checkRefusal(t, fx, err, ErrUnauthorized, false, 0, 0, "")
			checkNoToken(t, err, wrong)
		})
	}
}

// TestSecretsScrubbed: a forge answer that echoes the token shows
// "[redacted]" in its place.
func TestSecretsScrubbed(t *testing.T) {
	for _, newFixture := range fixtures {
		fx := newFixture(t)
		t.Run(fx.kind, func(t *testing.T) {
			echo := forgetest.Failure{Status: 401, Header: http.Header{"Content-Type": {"application/json"}},
				Body: fmt.Appendf(nil, `{"message":"token %s is revoked"}`, fx.token)}
			fx.fail("", 1, echo)
			_, err := fx.forge.OpenPullRequests(context.Background(), fx.repo, "image-resolver/")
			checkRefusal(t, fx, err, ErrUnauthorized, false, 0, 0, "token [redacted] is revoked")
		})
	}
}

// TestGitHubSecondaryRateLimitWithoutRetryAfter: GitHub's secondary limit
// may name no time; the documented minute is asked.
func TestGitHubSecondaryRateLimitWithoutRetryAfter(t *testing.T) {
	srv := forgetest.NewGitHub(t)
	srv.AddRepo("octo/app-config")
	f := mustNew(t, Config{Kind: KindGitHub, API: srv.URL, Token: staticToken(srv.Token)})
	srv.FailNext(forgetest.GitHubListPulls, 1, srv.SecondaryRateLimit(403, 0))
	_, err := f.OpenPullRequests(context.Background(), "octo/app-config", "")
	if !errors.Is(err, ErrRateLimited) || RetryAfter(err) != time.Minute || !Retryable(err) {
		t.Fatalf("err = %v (RetryAfter %s), want rate limited, a minute", err, RetryAfter(err))
	}
}

// TestStepRefusedAfterCreate: when a step after opening is refused, the
// opened pull request comes back with the error, and the other steps are
// still made.
func TestStepRefusedAfterCreate(t *testing.T) {
	srv := forgetest.NewGitHub(t)
	srv.AddRepo("octo/app-config")
	srv.AddUsers("alice")
	f := mustNew(t, Config{Kind: KindGitHub, API: srv.URL, Token: staticToken(srv.Token)})
	spec := Spec{Head: "image-resolver/web", Base: "main", Title: "Pin web", Reviewers: []string{"nobody"}, Assignees: []string{"alice"}, AutoMerge: true}
	pr, err := f.Create(context.Background(), "octo/app-config", spec)
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "Reviews may only be requested from collaborators") {
		t.Fatalf("err = %v, want the reviewer refused (422)", err)
	}
	var fe *Error
	if errors.As(err, &fe); fe.Op != OpReviewers {
		t.Errorf("error's Op = %q, want %q", fe.Op, OpReviewers)
	}
	if pr.Number != 1 {
		t.Fatalf("pull request %+v not returned with the error", pr)
	}
	held := srv.PRs("octo/app-config")[0]
	if !held.AutoMerge || len(held.Assignees) != 1 {
		t.Errorf("the steps after the refusal were not made: %+v", held)
	}
}

// TestStepsStopAtRateLimit: a rate limit on a step after opening stops the
// steps after it (they would be refused too).
func TestStepsStopAtRateLimit(t *testing.T) {
	srv := forgetest.NewGitHub(t)
	srv.AddRepo("octo/app-config")
	srv.AddUsers("alice", "bob")
	f := mustNew(t, Config{Kind: KindGitHub, API: srv.URL, Token: staticToken(srv.Token)})
	srv.FailNext(forgetest.GitHubAddLabels, 1, srv.RateLimit(403, time.Minute))
	spec := Spec{Head: "image-resolver/web", Base: "main", Title: "Pin web", Labels: []string{"x"}, Reviewers: []string{"bob"}, Assignees: []string{"alice"}, AutoMerge: true}
	pr, err := f.Create(context.Background(), "octo/app-config", spec)
	if !errors.Is(err, ErrRateLimited) || !Retryable(err) || RetryAfter(err) < 58*time.Second || pr.Number != 1 {
		t.Fatalf("pr %+v, err %v: want the pull request and the rate limit", pr, err)
	}
	for _, route := range []string{forgetest.GitHubAddAssignees, forgetest.GitHubRequestReviewers, forgetest.GitHubGraphQL} {
		if got := srv.Count(route); got != 0 {
			t.Errorf("%s: %d requests after the rate limit, want 0", route, got)
		}
	}
}

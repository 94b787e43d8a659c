package pin

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/argocd-image-resolver/argocd-image-resolver/pin/forge"
	"github.com/argocd-image-resolver/argocd-image-resolver/pin/forge/forgetest"
	"github.com/argocd-image-resolver/argocd-image-resolver/pin/gittest"
)

// forgeCase is one forge the pull-request writer is tested against: its test
// server, and what the server holds of the pull request opened for branch.
type forgeCase struct {
	kind      string
	api       string
	token     string
	create    string // the create route, for FailNext
	fail      func(op string, n int, f forgetest.Failure)
	rateLimit forgetest.Failure
	invalid   forgetest.Failure
	update    string            // the update request's route
	conflict  forgetest.Failure // a 409 on it: another replica's edit crossed ours
	opened    func(branch string) (labels, assignees, reviewers []string, autoMerge bool, ok bool)
	total     func() int
}

func githubCase(t *testing.T) forgeCase {
	s := forgetest.NewGitHub(t)
	s.AddRepo("org/apps")
	s.AddUsers("alice", "bob")
	return forgeCase{kind: forge.KindGitHub, api: s.URL, token: s.Token, create: forgetest.GitHubCreatePull, fail: s.FailNext,
		rateLimit: s.SecondaryRateLimit(403, time.Second), invalid: s.Validation("A pull request already exists for org:image-resolver/api."),
		update: forgetest.GitHubUpdatePull, conflict: s.Refusal(409),
		opened: func(branch string) ([]string, []string, []string, bool, bool) {
			for _, pr := range s.PRs("org/apps") {
				if pr.Head == branch && pr.State == "open" {
					return pr.Labels, pr.Assignees, pr.Reviewers, pr.AutoMerge, true
				}
			}
			return nil, nil, nil, false, false
		}, total: s.Total}
}

func gitlabCase(t *testing.T) forgeCase {
	s := forgetest.NewGitLab(t)
	s.AddProject("org/apps")
	s.AddUsers("alice", "bob")
	return forgeCase{kind: forge.KindGitLab, api: s.URL, token: s.Token, create: forgetest.GitLabCreateMR, fail: s.FailNext,
		rateLimit: s.RateLimit(time.Second, time.Second), invalid: s.Refusal(409),
		update: forgetest.GitLabUpdateMR, conflict: s.Refusal(409),
		opened: func(branch string) ([]string, []string, []string, bool, bool) {
			for _, mr := range s.MRs("org/apps") {
				if mr.SourceBranch == branch && mr.State == "opened" {
					return mr.Labels, mr.Assignees, mr.Reviewers, mr.AutoMerge, true
				}
			}
			return nil, nil, nil, false, false
		}, total: s.Total}
}

// TestPullRequestsOnGitHubAndGitLab: the writer's pull requests through the
// GitHub and GitLab clients, against servers answering as their REST
// documentation shows: labels, assignees, reviewers and auto-merge set when
// opened; a rate limit waited out (its Retry-After) and retried; a validation
// refusal not retried; the token in no error.
func TestPullRequestsOnGitHubAndGitLab(t *testing.T) {
	for _, mk := range []func(*testing.T) forgeCase{githubCase, gitlabCase} {
		fc := mk(t)
		t.Run(fc.kind, func(t *testing.T) {
			g := gittest.New(t)
			repoURL := g.Init(t, "apps.git", map[string]string{"apps/web/deployment.yaml": "kind: Deployment\n"})
			fg, err := forge.New(forge.Config{Kind: fc.kind, API: fc.api, Token: func(context.Context) (string, error) { return fc.token, nil }})
			if err != nil {
				t.Fatal(err)
			}
			w := NewWriter(WithRetry(3, 10*time.Millisecond), WithForges(func(string) (ForgeRepo, error) {
				return ForgeRepo{Forge: fg, Repo: "org/apps", Labels: []string{"images"}, Assignees: []string{"bob"}, Reviewers: []string{"alice"}, AutoMerge: true}, nil
			}))
			change := func(app, ref string) Change {
				c := prChange(nil, "", app, ref, "", "")
				c.RepoURL = repoURL
				return c
			}

			res := write(t, w, change("web", "ghcr.io/org/web:1.1.0"))
			labels, assignees, reviewers, auto, ok := fc.opened("image-resolver/web")
			if got := actions(res); got != "image-resolver/web=created" || !ok {
				t.Fatalf("%s, open %v", got, ok)
			}
			if strings.Join(labels, ",") != "images" || strings.Join(assignees, ",") != "bob" || strings.Join(reviewers, ",") != "alice" || !auto {
				t.Errorf("opened with labels %v, assignees %v, reviewers %v, auto-merge %v", labels, assignees, reviewers, auto)
			}

			// A rate limit on the create: waited out and retried.
			fc.fail(fc.create, 1, fc.rateLimit)
			start := time.Now()
			res = write(t, w, change("api", "ghcr.io/org/web:1.1.0"))
			if got := actions(res); got != "image-resolver/api=created" || res.Attempts != 2 {
				t.Errorf("after a rate limit: %s in %d attempts, want created in 2", got, res.Attempts)
			}
			if waited := time.Since(start); waited < time.Second {
				t.Errorf("retried after %s: the forge's Retry-After (1s) was not honoured", waited)
			}

			// A 409 on an update (another replica edited the same pull request at
			// that moment): the attempt is retried and the pull request updated.
			fc.fail(fc.update, 1, fc.conflict)
			res = write(t, w, change("web", "ghcr.io/org/web:1.2.0"))
			if got := actions(res); got != "image-resolver/web=updated" || res.Attempts != 2 {
				t.Errorf("after a 409 on the update: %s in %d attempts, want updated in 2", got, res.Attempts)
			}

			// A validation refusal: not retried, said clearly, no token.
			fc.fail(fc.create, 1, fc.invalid)
			before := fc.total()
			_, err = w.Write(context.Background(), []Change{change("db", "ghcr.io/org/web:1.1.0")})
			var fe *forge.Error
			if !errors.Is(err, ErrForge) || !errors.Is(err, forge.ErrInvalid) || !errors.As(err, &fe) || strings.Contains(err.Error(), fc.token) {
				t.Fatalf("validation refusal: %v", err)
			}
			// the create, and one listing to adopt a pull request another
			// replica may have opened a moment ago; not retried
			if n := fc.total() - before; n != 2 {
				t.Errorf("validation refusal: %d requests, want 2 (the create and one listing; not retried)", n)
			}
			g.NoForcePush(t, "apps.git", "main")
		})
	}
}

// TestForgeObserver: forge requests are counted by forge kind, operation and
// status, with "error" for no answer; observers of one registry share the
// counter.
func TestForgeObserver(t *testing.T) {
	reg := prometheus.NewRegistry()
	gh, gl := ForgeObserver(reg, forge.KindGitHub), ForgeObserver(reg, forge.KindGitLab)
	gh(forge.OpCreate, 201)
	gh(forge.OpCreate, 201)
	gh(forge.OpList, 0)
	gl(forge.OpUpdate, 401)
	want := `
# HELP argocd_image_resolver_pin_forge_requests_total Requests to forges for pull requests of pins, by forge kind, operation and HTTP status (error: no answer).
# TYPE argocd_image_resolver_pin_forge_requests_total counter
argocd_image_resolver_pin_forge_requests_total{code="201",forge="github",operation="create pull request"} 2
argocd_image_resolver_pin_forge_requests_total{code="401",forge="gitlab",operation="update pull request"} 1
argocd_image_resolver_pin_forge_requests_total{code="error",forge="github",operation="list pull requests"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "argocd_image_resolver_pin_forge_requests_total"); err != nil {
		t.Error(err)
	}
}

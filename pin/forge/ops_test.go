package forge

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/argocd-image-resolver/argocd-image-resolver/pin/forge/forgetest"
)

// TestOpenPullRequests lists every page (per_page 100: exact request
// counts) and keeps only open ones from the repository itself whose head
// starts with the prefix, every field mapped.
func TestOpenPullRequests(t *testing.T) {
	cases := []struct {
		mine         int // matching; 2 more open (a fork's, another prefix), 1 closed
		wantRequests int
	}{
		{mine: 0, wantRequests: 1},
		{mine: 98, wantRequests: 1},  // 100 open
		{mine: 99, wantRequests: 2},  // 101 open
		{mine: 248, wantRequests: 3}, // 250 open
	}
	for _, newFixture := range fixtures {
		for _, tc := range cases {
			fx := newFixture(t)
			t.Run(fmt.Sprintf("%s/%d", fx.kind, tc.mine), func(t *testing.T) {
				fx.seed(tc.mine)
				prs, err := fx.forge.OpenPullRequests(context.Background(), fx.repo, "image-resolver/")
				if err != nil {
					t.Fatal(err)
				}
				if got := fx.count(fx.routes[fxList]); got != tc.wantRequests {
					t.Errorf("list requests = %d, want %d", got, tc.wantRequests)
				}
				if len(prs) != tc.mine {
					t.Fatalf("got %d pull requests, want %d", len(prs), tc.mine)
				}
				for _, pr := range prs {
					checkListed(t, fx, pr)
				}
				fx.checkObserved(t)
				for _, o := range fx.obs.all() {
					if o != (observed{OpList, 200}) {
						t.Errorf("observed %v, want {%s 200}", o, OpList)
					}
				}
			})
		}
	}
}

// checkListed checks that a listed pull request carries what the server holds.
func checkListed(t *testing.T, fx *fixture, pr PullRequest) {
	t.Helper()
	var i int
	if _, err := fmt.Sscanf(pr.Head, "image-resolver/app-%03d", &i); err != nil {
		t.Fatalf("head %q: not one of the repository's own (a fork's or another prefix's leaked)", pr.Head)
	}
	held := fx.held(pr.Number)
	want := PullRequest{
		Number: pr.Number, URL: pr.URL, Head: held.Head, Base: "main", HeadSHA: fmt.Sprintf("%040x", i+1),
		Title: held.Title, Body: "body", State: StateOpen,
	}
	if pr != want {
		t.Errorf("got %+v\nwant %+v", pr, want)
	}
	if !strings.HasSuffix(pr.URL, fmt.Sprintf("/%d", pr.Number)) {
		t.Errorf("URL %q does not end with the number %d", pr.URL, pr.Number)
	}
}

// TestCreate opens a pull request, then adds exactly what the spec asks
// for: exact requests per operation, and the server's state.
func TestCreate(t *testing.T) {
	cases := []struct {
		name string
		spec Spec
		// want is the requests per operation on GitHub / GitLab.
		wantGitHub, wantGitLab map[string]int
	}{
		{
			name:       "plain",
			spec:       Spec{Head: "image-resolver/web", Base: "main", Title: "Pin web", Body: "old -> new"},
			wantGitHub: map[string]int{fxCreate: 1},
			wantGitLab: map[string]int{fxCreate: 1},
		},
		{
			name: "everything",
			spec: Spec{Head: "image-resolver/web", Base: "main", Title: "Pin web", Body: "old -> new",
				Labels: []string{"images", "automated"}, Reviewers: []string{"bob"}, Assignees: []string{"alice"}, AutoMerge: true},
			wantGitHub: map[string]int{fxCreate: 1, fxLabels: 1, fxAssignees: 1, fxReviewers: 1, fxAutoMerge: 1},
			wantGitLab: map[string]int{fxCreate: 1, fxUsers: 2, fxAutoMerge: 1},
		},
		{
			name:       "labels only",
			spec:       Spec{Head: "image-resolver/web", Base: "main", Title: "Pin web", Labels: []string{"images"}},
			wantGitHub: map[string]int{fxCreate: 1, fxLabels: 1},
			wantGitLab: map[string]int{fxCreate: 1},
		},
	}
	for _, newFixture := range fixtures {
		for _, tc := range cases {
			fx := newFixture(t)
			t.Run(fx.kind+"/"+tc.name, func(t *testing.T) {
				pr, err := fx.forge.Create(context.Background(), fx.repo, tc.spec)
				if err != nil {
					t.Fatal(err)
				}
				want := tc.wantGitHub
				if fx.kind == KindGitLab {
					want = tc.wantGitLab
				}
				if got, want := fx.requests(), fx.want(want); !maps.Equal(got, want) {
					t.Errorf("requests = %v, want %v", got, want)
				}
				checkCreated(t, fx, pr, tc.spec)
				fx.checkObserved(t)
			})
		}
	}
}

func checkCreated(t *testing.T, fx *fixture, pr PullRequest, spec Spec) {
	t.Helper()
	if pr.Number <= 0 || pr.URL == "" || pr.Head != spec.Head || pr.Base != spec.Base || pr.Title != spec.Title ||
		pr.Body != spec.Body || pr.State != StateOpen || len(pr.HeadSHA) != 40 {
		t.Errorf("created %+v, not what %+v asked", pr, spec)
	}
	held := fx.held(pr.Number)
	if held.Title != spec.Title || held.Body != spec.Body || held.Head != spec.Head || held.Base != spec.Base {
		t.Errorf("the server holds %+v, not what %+v asked", held, spec)
	}
	for name, pair := range map[string][2][]string{
		"labels": {held.Labels, spec.Labels}, "assignees": {held.Assignees, spec.Assignees}, "reviewers": {held.Reviewers, spec.Reviewers},
	} {
		if !slices.Equal(pair[0], pair[1]) {
			t.Errorf("%s held = %q, want %q", name, pair[0], pair[1])
		}
	}
	if held.AutoMerge != spec.AutoMerge {
		t.Errorf("auto-merge held = %v, want %v", held.AutoMerge, spec.AutoMerge)
	}
	if !held.KeepsBranch {
		t.Error("the pull request lets the forge modify or remove the resolver's branch (maintainer_can_modify / remove_source_branch)")
	}
}

// TestUpdate sets title and body of the open pull request with one request.
func TestUpdate(t *testing.T) {
	for _, newFixture := range fixtures {
		fx := newFixture(t)
		t.Run(fx.kind, func(t *testing.T) {
			ctx := context.Background()
			pr, err := fx.forge.Create(ctx, fx.repo, Spec{Head: "image-resolver/web", Base: "main", Title: "Pin web 1.0", Body: "one"})
			if err != nil {
				t.Fatal(err)
			}
			spec := Spec{Head: "image-resolver/web", Base: "main", Title: "Pin web 1.1", Body: "two"}
			got, err := fx.forge.Update(ctx, fx.repo, pr.Number, spec)
			if err != nil {
				t.Fatal(err)
			}
			if got.Number != pr.Number || got.Title != spec.Title || got.Body != spec.Body || got.State != StateOpen || got.HeadSHA != pr.HeadSHA {
				t.Errorf("updated %+v, want #%d %q %q", got, pr.Number, spec.Title, spec.Body)
			}
			if held := fx.held(pr.Number); held.Title != spec.Title || held.Body != spec.Body {
				t.Errorf("the server holds %+v", held)
			}
			if got, want := fx.requests(), fx.want(map[string]int{fxCreate: 1, fxUpdate: 1}); !maps.Equal(got, want) {
				t.Errorf("requests = %v, want %v", got, want)
			}
			fx.checkObserved(t)
		})
	}
}

// TestGitLabUsers: usernames are looked up once per forge; an unknown one
// is refused, naming it, before any merge request is opened.
func TestGitLabUsers(t *testing.T) {
	fx := newGitLabFixture(t)
	ctx := context.Background()
	for i, head := range []string{"image-resolver/a", "image-resolver/b"} {
		spec := Spec{Head: head, Base: "main", Title: "Pin", Assignees: []string{"alice"}, Reviewers: []string{"bob", "alice"}}
		if _, err := fx.forge.Create(ctx, fx.repo, spec); err != nil {
			t.Fatal(err)
		}
		if got := fx.count(forgetest.GitLabListUsers); got != 2 {
			t.Errorf("after %d merge requests: %d user look-ups, want 2 (alice, bob, once)", i+1, got)
		}
	}
	_, err := fx.forge.Create(ctx, fx.repo, Spec{Head: "image-resolver/c", Base: "main", Title: "Pin", Reviewers: []string{"nobody"}})
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), `no user "nobody"`) || Retryable(err) {
		t.Errorf("err = %v, want the unknown user named, not found", err)
	}
	if got := fx.count(forgetest.GitLabCreateMR); got != 2 {
		t.Errorf("%d merge requests opened, want 2 (none with an unknown reviewer)", got)
	}
}

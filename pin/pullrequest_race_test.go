package pin

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/argocd-image-resolver/argocd-image-resolver/pin/forge/giteatest"
)

// TestTwoWritersRacePullRequests: two writers (two replicas) write the same
// pins by pull request at once, three rounds: one pull request per app each
// round, never two; the base never moves.
func TestTwoWritersRacePullRequests(t *testing.T) {
	g := giteatest.Shared(t)
	p := g.Proxy(t)
	const apps = 4
	files := map[string]string{}
	for i := range apps {
		files[fmt.Sprintf("apps/a%d/deployment.yaml", i)] = "kind: Deployment\n"
	}
	repo := g.CreateRepo(t, "race", files)
	mainTip := g.BranchSHA(t, repo, "main")
	ws := []*Writer{prWriter(t, g, p, repo, WithRetry(5, 20_000_000)), prWriter(t, g, p, repo, WithRetry(5, 20_000_000))}
	base := ""
	for r := 1; r <= 3; r++ {
		ref := fmt.Sprintf("ghcr.io/org/web:1.%d.0", r)
		var cs []Change
		for i := range apps {
			cs = append(cs, prChange(g, repo, fmt.Sprintf("a%d", i), ref, base, ""))
		}
		var wg sync.WaitGroup
		for _, w := range ws {
			wg.Go(func() {
				res := write(t, w, cs...)
				t.Logf("round %d: %s (attempts %d)", r, actions(res), res.Attempts)
			})
		}
		wg.Wait()
		open := g.PullRequests(t, repo, "open")
		if len(open) != apps {
			t.Fatalf("round %d: %d open pull requests, want %d", r, len(open), apps)
		}
		for _, pr := range open {
			if !strings.Contains(pr.Body, ref) {
				t.Errorf("round %d: pull request #%d (%s) does not carry %s:\n%s", r, pr.Number, pr.Head, ref, pr.Body)
			}
		}
	}
	if tip := g.BranchSHA(t, repo, "main"); tip != mainTip {
		t.Errorf("main moved")
	}
}

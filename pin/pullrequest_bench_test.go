package pin

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/pin/forge"
	"github.com/argocd-image-resolver/argocd-image-resolver/pin/forge/forgetest"
	"github.com/argocd-image-resolver/argocd-image-resolver/pin/gittest"
)

// BenchmarkPullRequests500 is the writer's own cost of issue 23's pull
// request figure: 500 apps of one repository (loopback git) get a new pin,
// one pull request each (pin-pr-group app), against a GitHub server that
// answers at once (forgetest): the branches built and pushed in one push,
// the pull requests opened, then updated by a newer pin. It reports seconds
// and API calls per app for each round; a real forge adds its own time per
// request (Gitea on this machine: about 2 s per pull request opened, see
// BenchmarkMonorepoPullRequests).
func BenchmarkPullRequests500(b *testing.B) {
	const apps = 500
	for range b.N {
		b.StopTimer()
		g := gittest.New(b)
		files := map[string]string{}
		for i := range apps {
			files[fmt.Sprintf("apps/a%03d/deployment.yaml", i)] = "kind: Deployment\n"
		}
		repoURL := g.Init(b, "apps.git", files)
		gh := forgetest.NewGitHub(b)
		gh.AddRepo("org/apps")
		fg, err := forge.New(forge.Config{Kind: forge.KindGitHub, API: gh.URL, Token: func(context.Context) (string, error) { return gh.Token, nil }})
		if err != nil {
			b.Fatal(err)
		}
		w := NewWriter(WithForges(func(string) (ForgeRepo, error) { return ForgeRepo{Forge: fg, Repo: "org/apps"}, nil }))
		changes := func(ref, base string) []Change {
			var cs []Change
			for i := range apps {
				c := prChange(nil, "", fmt.Sprintf("a%03d", i), ref, base, "")
				c.RepoURL = repoURL
				cs = append(cs, c)
			}
			return cs
		}
		b.StartTimer()
		for round, ref := range []string{"ghcr.io/org/web:1.1.0", "ghcr.io/org/web:1.2.0"} {
			before := gh.Total()
			start := time.Now()
			res, err := w.Write(context.Background(), changes(ref, ""))
			if err != nil || len(res.PullRequests) != apps {
				b.Fatalf("round %d: %d pull requests, %v", round+1, len(res.PullRequests), err)
			}
			name := []string{"open", "update"}[round]
			b.ReportMetric(time.Since(start).Seconds(), "s-to-"+name+"-all/op")
			b.ReportMetric(float64(gh.Total()-before)/apps, "api-calls-per-app-"+name+"/op")
		}
	}
}

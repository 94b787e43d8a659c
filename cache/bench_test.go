package cache

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

// ---- many apps over shared repositories ----

var appPolicies = []resolve.PolicySpec{
	{Constraint: "^1", Platforms: []string{"linux/arm64"}},
	{Strategy: "newest-build", Platforms: []string{"linux/amd64"}},
	{Constraint: "~1.0"},
	{Strategy: "digest", Constraint: "1.0.5"},
}

// appBatch is app i's render: three images over the shared repositories.
func appBatch(s *rt.Server, repos []string, i int) []resolve.Request {
	var reqs []resolve.Request
	for k, off := range []int{0, 7, 13} {
		reqs = append(reqs, resolve.Request{Image: s.Ref(repos[(i+off)%len(repos)]), Policy: appPolicies[(i+k)%len(appPolicies)]})
	}
	return reqs
}

// renderAll renders n apps, 16 at a time, through batch.
func renderAll(b *testing.B, batch func(i int) resolve.Batch, s *rt.Server, repos []string, n int) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			ans, err := batch(i).ResolveBatch(context.Background(), fmt.Sprintf("app-%d", i), appBatch(s, repos, i))
			if err != nil {
				b.Error(err)
				return
			}
			for _, a := range ans {
				if a.Error != "" {
					b.Errorf("app %d: %s", i, a.Error)
				}
			}
		})
	}
	wg.Wait()
}

func benchStack(b *testing.B, s *rt.Server, opts ...Option) *fixture {
	return newFixture(b, s, nil, nil, opts...)
}

// BenchmarkManyApps renders 200 apps (3 images each, 4 policies, newest-build
// among them) over 20 repositories of 100 tags, and reports the registry requests
// one round of 200 renders costs: without the daemon (each render a cold client, as
// generate's fallback), through a cold daemon, a warm one within the TTLs, and a
// warm one whose tag lists and digests all expired.
func BenchmarkManyApps(b *testing.B) {
	const apps = 200
	s := rt.New(b)
	repos := s.SeedSharedRepositories(b)
	report := func(b *testing.B) {
		b.ReportMetric(float64(s.Total())/float64(b.N), "requests/op")
		b.ReportMetric(float64(s.Count(rt.Tags))/float64(b.N), "lists/op")
		b.ReportMetric(float64(s.Count(rt.ManifestHead))/float64(b.N), "heads/op")
	}
	b.Run("no-daemon", func(b *testing.B) {
		s.ResetCounts()
		for b.Loop() {
			renderAll(b, func(int) resolve.Batch {
				remote, err := resolve.NewRemote(resolve.WithKeychain(authn.NewMultiKeychain()))
				if err != nil {
					b.Fatal(err)
				}
				return resolve.NewResolver(remote)
			}, s, repos, apps)
		}
		report(b)
	})
	b.Run("daemon-cold", func(b *testing.B) {
		s.ResetCounts()
		for b.Loop() {
			f := benchStack(b, s)
			renderAll(b, func(int) resolve.Batch { return f.resolver }, s, repos, apps)
		}
		report(b)
	})
	b.Run("daemon-warm", func(b *testing.B) {
		f := benchStack(b, s)
		renderAll(b, func(int) resolve.Batch { return f.resolver }, s, repos, apps)
		s.ResetCounts()
		for b.Loop() {
			renderAll(b, func(int) resolve.Batch { return f.resolver }, s, repos, apps)
		}
		report(b)
	})
	b.Run("daemon-expired", func(b *testing.B) {
		clock := newFakeClock()
		f := benchStack(b, s, WithClock(clock.Now), WithRefreshAhead(0))
		renderAll(b, func(int) resolve.Batch { return f.resolver }, s, repos, apps)
		s.ResetCounts()
		for b.Loop() {
			clock.Advance(DefaultHeadTTL) // every list and digest expired
			renderAll(b, func(int) resolve.Batch { return f.resolver }, s, repos, apps)
		}
		report(b)
	})
}

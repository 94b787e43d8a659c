package resolve_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

// BenchmarkResolve1000Tags resolves a 1,000-tag repository of distinct single- and
// multi-platform images, cold (a new client per resolution, as a `generate` process
// without the daemon has), with 0 and 20 ms added to every registry request. It
// reports registry requests per resolution besides ns/op and allocations.
func BenchmarkResolve1000Tags(b *testing.B) {
	s := rt.New(b, rt.WithPageSize(100))
	for i := range 1000 {
		tag := fmt.Sprintf("1.%d.%d", i/100, i%100)
		created := t0.Add(time.Duration(i) * time.Hour)
		if i%2 == 0 {
			s.PushIndex(b, "app", tag, rt.Index(created, []string{"linux/amd64", "linux/arm64"}, rt.WithSeed(tag)))
		} else {
			s.Push(b, "app", tag, rt.Image(created, "linux/amd64", rt.WithSeed(tag)))
		}
	}
	cases := []struct {
		name string
		spec resolve.PolicySpec
	}{
		{"semver", resolve.PolicySpec{Platforms: []string{"linux/arm64"}}},
		{"newest-build", resolve.PolicySpec{Strategy: "newest-build", Platforms: []string{"linux/amd64"}}},
	}
	for _, latency := range []time.Duration{0, 20 * time.Millisecond} {
		for _, c := range cases {
			b.Run(fmt.Sprintf("%s/latency=%s", c.name, latency), func(b *testing.B) {
				s.SetLatency(latency)
				defer s.SetLatency(0)
				s.ResetCounts()
				b.ReportAllocs()
				for b.Loop() {
					r := newResolver(b)
					if _, err := resolveIn(b, r, s, "app", c.spec); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(s.Total())/float64(b.N), "requests/op")
			})
		}
	}
}

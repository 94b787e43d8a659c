package metadata_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve/metadata"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

// The figures of issue 27: newest-build over 1,000 multi-platform tags
// (linux/amd64 and linux/arm64 indexes) for linux/arm64, cold, each metadata API
// against the OCI protocol, on the same registry contents. Builds are an hour
// apart and each is pushed ten minutes after it is built (a CI pipeline).

// figureCase is one metadata API in front of the test registry.
type figureCase struct {
	api  string
	host string // the registry host images name
	repo string // the repository path (the test registry's)
	// serve starts the vendor's API over s.
	serve func(t testing.TB, s *registrytest.Server) *registrytest.APIServer
	// registry is the Options.Registry of the client ("": host).
	registry func(a *registrytest.APIServer) string
}

var figureCases = []figureCase{
	{api: resolve.MetadataDockerHub, host: "docker.io", repo: "library/app",
		serve: func(t testing.TB, s *registrytest.Server) *registrytest.APIServer { return s.DockerHubAPI(t) }},
	{api: resolve.MetadataHarbor, host: "harbor.example.com", repo: "proj/app",
		serve: func(t testing.TB, s *registrytest.Server) *registrytest.APIServer { return s.HarborAPI(t) }},
	{api: resolve.MetadataGAR, host: "europe-docker.pkg.dev", repo: "proj/team/app",
		serve: func(t testing.TB, s *registrytest.Server) *registrytest.APIServer { return s.GARAPI(t) }},
	{api: resolve.MetadataACR, repo: "team/app",
		serve:    func(t testing.TB, s *registrytest.Server) *registrytest.APIServer { return s.ACRAPI(t) },
		registry: func(a *registrytest.APIServer) string { return a.Host }},
	{api: resolve.MetadataECR, host: "123456789012.dkr.ecr.eu-west-1.amazonaws.com", repo: "ecr/app",
		serve: func(t testing.TB, s *registrytest.Server) *registrytest.APIServer { return s.ECRAPI(t) }},
	{api: resolve.MetadataQuay, host: "quay.io", repo: "ns/app",
		serve: func(t testing.TB, s *registrytest.Server) *registrytest.APIServer { return s.QuayAPI(t) }},
}

// figureBound is the bound of requests per API (OCI and API together).
var figureBound = map[string]int{
	resolve.MetadataDockerHub: 15, resolve.MetadataHarbor: 12, resolve.MetadataGAR: 12, resolve.MetadataACR: 12,
	resolve.MetadataECR: 15, resolve.MetadataQuay: 15,
}

// figureRegistry is one test registry holding every case's repository.
var figureRegistry struct {
	once sync.Once
	s    *registrytest.Server
	err  error
}

func figureServer(t testing.TB) *registrytest.Server {
	t.Helper()
	figureRegistry.once.Do(func() {
		s, err := registrytest.NewServer(registrytest.WithPageSize(100))
		if err != nil {
			figureRegistry.err = err
			return
		}
		base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		for _, c := range figureCases {
			for i := range 1000 {
				created := base.Add(time.Duration(i) * time.Hour)
				tag := fmt.Sprintf("build-%03d", i)
				if err := s.PushIndexE(c.repo, tag, registrytest.Index(created, []string{"linux/amd64", "linux/arm64"}, registrytest.WithSeed(c.repo+tag))); err != nil {
					figureRegistry.err = err
					return
				}
				s.SetPushed(c.repo, tag, created.Add(10*time.Minute))
			}
		}
		figureRegistry.s = s
	})
	if figureRegistry.err != nil {
		t.Fatal(figureRegistry.err)
	}
	return figureRegistry.s
}

// latency delays every request by d, as a registry far away does.
type latency struct {
	next http.RoundTripper
	d    time.Duration
}

func (l latency) RoundTrip(r *http.Request) (*http.Response, error) {
	time.Sleep(l.d)
	return l.next.RoundTrip(r)
}

// figureResolve resolves the case once, cold, and returns the result and the
// requests to the registry and to the API.
func figureResolve(t testing.TB, s *registrytest.Server, c figureCase, native bool, delay time.Duration) (*resolve.Result, int, int, int) {
	t.Helper()
	spec := resolve.PolicySpec{Strategy: "newest-build", Platforms: []string{"linux/arm64"}}
	res, a, err := resolveVia(t, s, c, native, delay, spec)
	if err != nil {
		t.Fatalf("%s: %v", c.api, err)
	}
	return res, s.Total(), a.Total(), s.Count(registrytest.ManifestGet)
}

// resolveWith resolves spec for the case, through its API or not.
func resolveWith(t testing.TB, s *registrytest.Server, c figureCase, native bool, spec resolve.PolicySpec) (*resolve.Result, error) {
	t.Helper()
	res, _, err := resolveVia(t, s, c, native, 0, spec)
	return res, err
}

// resolveVia resolves spec for the case, cold, counting from zero on s and the
// API server it starts.
func resolveVia(t testing.TB, s *registrytest.Server, c figureCase, native bool, delay time.Duration, spec resolve.PolicySpec) (*resolve.Result, *registrytest.APIServer, error) {
	t.Helper()
	a := c.serve(t, s)
	host := c.host
	if c.registry != nil {
		host = c.registry(a)
	}
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDFIGURES")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "figures-secret")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	remote, err := resolve.NewRemote(resolve.WithRegistries([]resolve.RegistryConfig{{Prefix: host, API: s.Host, Insecure: true}}),
		resolve.WithKeychain(authn.NewMultiKeychain()), resolve.WithTransportWrapper(func(rt http.RoundTripper) http.RoundTripper { return latency{rt, delay} }))
	if err != nil {
		t.Fatal(err)
	}
	var opts []resolve.ResolverOption
	if native {
		api, err := metadata.New(c.api, metadata.Options{BaseURL: a.URL, Registry: host, Transport: latency{http.DefaultTransport, delay}})
		if err != nil {
			t.Fatal(err)
		}
		opts = append(opts, resolve.WithMetadataAPIs(func(name.Repository) resolve.MetadataAPI { return api }, func(api string, err error) {
			t.Errorf("%s fell back: %v", api, err)
		}))
	}
	r := resolve.NewResolver(remote, append(opts, resolve.WithConcurrency(64))...)
	p, err := spec.Compile()
	if err != nil {
		t.Fatal(err)
	}
	repo, err := name.NewRepository(host+"/"+c.repo, name.WeakValidation)
	if err != nil {
		t.Fatal(err)
	}
	s.ResetCounts()
	a.ResetCounts()
	res, err := r.Resolve(context.Background(), repo, repo.String(), p)
	return res, a, err
}

// TestFiguresRequests: each API answers build-999 with at most the issue's
// requests (OCI and API together; Docker Hub at most 3 pulls), where the OCI
// protocol takes 3,011 (2,000 manifest GETs: pulls on Docker Hub).
func TestFiguresRequests(t *testing.T) {
	s := figureServer(t)
	for _, c := range figureCases {
		t.Run(c.api, func(t *testing.T) {
			res, reg, api, pulls := figureResolve(t, s, c, true, 0)
			if res.Tag != "build-999" || res.MetadataAPI != c.api {
				t.Errorf("chose %s through %q", res.Tag, res.MetadataAPI)
			}
			if reg+api > figureBound[c.api] {
				t.Errorf("%d requests (%d registry, %d API), bound %d", reg+api, reg, api, figureBound[c.api])
			}
			if c.api == resolve.MetadataDockerHub && pulls > 3 {
				t.Errorf("%d pulls, bound 3", pulls)
			}
			t.Logf("%s: %d requests (%d registry, %d API), %d manifest GETs; %d candidates read through OCI, %d build times from the API",
				c.api, reg+api, reg, api, pulls, res.ConfigReads, res.BuildTimeReads)
		})
	}
	res, reg, _, pulls := figureResolve(t, s, figureCases[0], false, 0)
	if res.Tag != "build-999" || reg != 3011 || pulls != 2000 {
		t.Errorf("OCI protocol: %s in %d requests, %d manifest GETs; want build-999, 3,011, 2,000", res.Tag, reg, pulls)
	}
}

// BenchmarkFigures: the same with 20 ms per request, wall time per resolution.
func BenchmarkFigures(b *testing.B) {
	s := figureServer(b)
	for _, c := range append(figureCases, figureCase{api: "oci"}) {
		b.Run(c.api, func(b *testing.B) {
			fc, native := c, true
			if c.api == "oci" {
				fc, native = figureCases[0], false
			}
			var reg, api, pulls int
			for range b.N {
				_, reg, api, pulls = figureResolve(b, s, fc, native, 20*time.Millisecond)
			}
			b.ReportMetric(float64(reg+api), "requests")
			b.ReportMetric(float64(pulls), "manifest-GETs")
		})
	}
}

// TestVendorAPIsAgreeWithOCI: on the demo registry (testdata/registry/demo.yaml),
// every vendor API's client against its server answers, for every strategy,
// required platforms and pin, what the OCI protocol answers: the same
// reference, digest and skipped tags, or the same refusal.
func TestVendorAPIsAgreeWithOCI(t *testing.T) {
	sc, err := registrytest.LoadScenario(filepath.Join("..", "..", "testdata", "registry", "demo.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	prefixed := &registrytest.Scenario{Repositories: map[string]*registrytest.Repository{}}
	for repo, r := range sc.Repositories {
		prefixed.Repositories["proj/"+repo] = r // GAR's paths are project/repository/image
	}
	s := registrytest.New(t)
	for _, seed := range []*registrytest.Scenario{sc, prefixed} {
		if err := s.SeedScenario(seed); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range figureCases {
		t.Run(c.api, func(t *testing.T) {
			for repo := range sc.Repositories {
				if c.api == resolve.MetadataGAR {
					repo = "proj/" + repo
				}
				vc := c
				vc.repo = repo
				for _, st := range []string{"semver", "newest-build", "alphabetical", "numeric"} {
					for _, plats := range [][]string{nil, {"linux/amd64"}, {"linux/arm64"}} {
						for _, pin := range []bool{false, true} {
							spec := resolve.PolicySpec{Strategy: st, Platforms: plats, PinDigest: pin}
							want := agreeOutcome(resolveWith(t, s, vc, false, spec))
							got := agreeOutcome(resolveWith(t, s, vc, true, spec))
							if got != want {
								t.Errorf("%s %+v:\n %s %s\n    OCI %s", repo, spec, c.api, got, want)
							}
						}
					}
				}
			}
		})
	}
}

func agreeOutcome(res *resolve.Result, err error) string {
	if err != nil {
		var nt *resolve.NoTagError
		if errors.As(err, &nt) {
			return "no tag: " + nt.Reason
		}
		return "error: " + err.Error()
	}
	var sk []string
	for _, s := range res.Skipped {
		sk = append(sk, s.Tag+" "+s.Reason)
	}
	return fmt.Sprintf("%s %s skipped %v", res.Tag, res.Digest, sk)
}

package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// How a test request proves it holds a kind's secret, independently of the
// kinds table under test.
const (
	viaHubSignature   = "X-Hub-Signature-256"
	viaGiteaSignature = "X-Gitea-Signature"
	viaBearer         = "Authorization: Bearer"
	viaRawHeader      = "Authorization"
	viaPathToken      = "path token"
)

// sampleCase is one sample body of testdata/webhooks, how its sender sends it,
// and what the handler must make of it.
type sampleCase struct {
	kind    string
	file    string
	via     string      // how the secret is sent
	header  http.Header // what else the sender sets
	want    []Event     // the pushes, in order
	ignored int         // events of the body that are not pushes
	// noReplay: the kind takes no identical body for a replay (quay).
	noReplay bool
}

const (
	appDigest    = "sha256:60c53cf43e42f43ae8490dbaa5c151336113994fab54394f7ca3e6bea4b02384"
	ghcrDigest   = "sha256:91053a6df62eeec0286b6ed6652bb394e5441b7353473b41a8d60d9d06f3f2d9"
	ghcrRPDigest = "sha256:708a2b5bd368cdf04cb5149e0e554e181b46807c8faf793165048f75eef202dc"
	harborDigest = "sha256:e89a8e5415f350c5448bd3361499020d5c86e6620159b12a1aa42d87937eba74"
	harborCE     = "sha256:5e3fb578ecbf79fbcbf62304088dcdb08921826cca1195a41b4e38bfd6fd5254"
	acrDigest    = "sha256:6f3095ea2b3eeae3895d2f0bedabc7b8928f5317e4e9ec611e4214e0090d773c"
	garDigest    = "sha256:b974ebb9a97901339d70cbd59a98baeb15228d9f39e326d41014aa938512c4e9"
	ecrDigest    = "sha256:02915c173f5b5238c520514331165c9c1e1d2a5a6d088b612fd675a5f265a853"
	zotDigest    = "sha256:d52b78b0b0630151485ed81ed59c85567c740bc586588f8a23f14258ddebecda"
)

func hdr(kv ...string) http.Header {
	h := make(http.Header)
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

var sampleCases = []sampleCase{
	{kind: "distribution", file: "distribution.json", via: viaBearer,
		header:  hdr("Content-Type", "application/vnd.docker.distribution.events.v2+json"),
		want:    []Event{{Kind: "distribution", Registry: "registry.example.com", Repository: "team/app", Tag: "v1.4.2", Digest: appDigest}},
		ignored: 1},
	{kind: "dockerhub", file: "dockerhub.json", via: viaPathToken, header: hdr("Content-Type", "application/json"),
		want: []Event{{Kind: "dockerhub", Registry: "docker.io", Repository: "acme/app", Tag: "1.27.3"}}},
	{kind: "github", file: "github.json", via: viaHubSignature,
		header: hdr("X-GitHub-Event", "package", "X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958", "Content-Type", "application/json"),
		want:   []Event{{Kind: "github", Registry: "ghcr.io", Repository: "acme-corp/app", Tag: "v2.3.0", Digest: ghcrDigest}}},
	{kind: "github", file: "github-registry-package.json", via: viaHubSignature,
		header: hdr("X-GitHub-Event", "registry_package", "X-GitHub-Delivery", "9a1f06a0-cc78-11e3-81ab-4c9367dc0958"),
		want:   []Event{{Kind: "github", Registry: "ghcr.io", Repository: "acme-corp/app", Digest: ghcrRPDigest}}},
	{kind: "github", file: "github-npm.json", via: viaHubSignature,
		header: hdr("X-GitHub-Event", "package", "X-GitHub-Delivery", "b0c2d7a4-cc78-11e3-81ab-4c9367dc0958"), ignored: 1},
	{kind: "harbor", file: "harbor.json", via: viaRawHeader, header: hdr("Content-Type", "application/json"),
		want: []Event{{Kind: "harbor", Registry: "harbor.example.com", Repository: "payments/api", Tag: "3.1.0", Digest: harborDigest}}},
	{kind: "harbor", file: "harbor-cloudevents.json", via: viaRawHeader, header: hdr("Content-Type", "application/cloudevents+json"),
		want: []Event{{Kind: "harbor", Registry: "harbor.example.com:8443", Repository: "payments/api", Digest: harborCE}}},
	{kind: "quay", file: "quay.json", via: viaPathToken, header: hdr("Content-Type", "application/json"), noReplay: true,
		want: []Event{
			{Kind: "quay", Registry: "quay.io", Repository: "acme/web", Tag: "latest"},
			{Kind: "quay", Registry: "quay.io", Repository: "acme/web", Tag: "2026.03.09"}}},
	{kind: "acr", file: "acr.json", via: viaPathToken, header: hdr("Content-Type", "application/json"),
		want: []Event{{Kind: "acr", Registry: "myregistry.azurecr.io", Repository: "hello-world", Tag: "v1", Digest: acrDigest}}},
	{kind: "acr", file: "acr.json", via: viaBearer, header: hdr("Content-Type", "application/json"),
		want: []Event{{Kind: "acr", Registry: "myregistry.azurecr.io", Repository: "hello-world", Tag: "v1", Digest: acrDigest}}},
	{kind: "gar", file: "gar.json", via: viaPathToken, header: hdr("Content-Type", "application/json"),
		want: []Event{{Kind: "gar", Registry: "us-east1-docker.pkg.dev", Repository: "my-project/my-repo/hello-world", Tag: "1.1", Digest: garDigest}}},
	{kind: "gar", file: "gar-unwrapped.json", via: viaPathToken, header: hdr("X-Goog-Pubsub-Message-Id", "2070443601311541"),
		want: []Event{{Kind: "gar", Registry: "us-east1-docker.pkg.dev", Repository: "my-project/my-repo/hello-world", Tag: "1.1", Digest: garDigest}}},
	{kind: "ecr", file: "ecr.json", via: viaBearer, header: hdr("Content-Type", "application/json"),
		want: []Event{{Kind: "ecr", Registry: "123456789012.dkr.ecr.us-west-2.amazonaws.com", Repository: "team/api", Tag: "latest", Digest: ecrDigest}}},
	{kind: "zot", file: "zot.json", via: viaBearer,
		header: hdr("Content-Type", "application/json", "Ce-Specversion", "1.0", "Ce-Id", "6b1f2a9e-0d3c-4e8f-a7b6-5c4d3e2f1a0b",
			"Ce-Type", "zotregistry.image.updated", "Ce-Source", "zotregistry.dev", "Ce-Time", "2026-03-09T14:44:26Z"),
		want: []Event{{Kind: "zot", Repository: "space/my-image", Tag: "latest", Digest: zotDigest}}},
	{kind: "zot", file: "zot-structured.json", via: viaPathToken, header: hdr("Content-Type", "application/cloudevents+json; charset=utf-8"),
		want: []Event{{Kind: "zot", Registry: "zot.example.com", Repository: "space/my-image", Digest: zotDigest}}},
	{kind: "gitea", file: "gitea.json", via: viaGiteaSignature,
		header: hdr("X-Gitea-Event", "package", "X-Gitea-Delivery", "1e0f2c4a-7b6d-4e5f-9a8b-0c1d2e3f4a5b", "Content-Type", "application/json"),
		want:   []Event{{Kind: "gitea", Registry: "git.example.com", Repository: "platform/shop/web", Tag: "v5.0.1"}}},
}

// secretOf is the test secret of a kind.
func secretOf(kind string) string { return "s3cr3t-" + kind + "-0f9e8d7c6b5a4321" }

// wrongSecret is a secret of the right length that is not the kind's.
func wrongSecret(kind string) string { return "wr0ng!-" + kind + "-0f9e8d7c6b5a4321" }

func testSecrets() Secrets {
	s := make(Secrets)
	for _, k := range Kinds() {
		s[k] = []byte(secretOf(k))
	}
	return s
}

func readSample(t *testing.T, file string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "webhooks", file))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func hmacHex(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// newRequest is a POST of body to kind's endpoint, the secret sent via how
// (nothing when secret is "").
func newRequest(kind, via, secret string, body []byte, header http.Header) *http.Request {
	path := "/webhooks/" + kind
	if via == viaPathToken && secret != "" {
		path += "/" + url.PathEscape(secret)
	}
	req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
	for k, v := range header {
		req.Header[k] = append([]string(nil), v...)
	}
	if secret == "" {
		return req
	}
	switch via {
	case viaHubSignature:
		req.Header.Set("X-Hub-Signature-256", "sha256="+hmacHex(secret, body))
	case viaGiteaSignature:
		req.Header.Set("X-Gitea-Signature", hmacHex(secret, body))
	case viaBearer:
		req.Header.Set("Authorization", "Bearer "+secret)
	case viaRawHeader:
		req.Header.Set("Authorization", secret)
	}
	return req
}

// recordingSink records the pushes it is told of; repositories in unused are
// used by no app.
type recordingSink struct {
	mu     sync.Mutex
	events []Event
	unused map[string]bool
}

func (s *recordingSink) Push(_ context.Context, ev Event) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, ev)
	return !s.unused[ev.Repository], nil
}

func (s *recordingSink) got() []Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Event(nil), s.events...)
}

// fakeClock is a time that moves only when told to.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// sleep lets d pass on the clock at once.
func (c *fakeClock) sleep(_ context.Context, d time.Duration) bool {
	c.advance(d)
	return true
}

// withSleep makes the handler wait with sleep (for tests).
func withSleep(sleep func(ctx context.Context, d time.Duration) bool) Option {
	return func(c *config) { c.sleep = sleep }
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// fixture is a Handler serving every kind, with what it writes to.
type fixture struct {
	h     *Handler
	sink  *recordingSink
	reg   *prometheus.Registry
	logs  *bytes.Buffer
	clock *fakeClock
}

func newFixture(t *testing.T, opts ...Option) *fixture {
	t.Helper()
	f := &fixture{sink: &recordingSink{unused: map[string]bool{}}, reg: prometheus.NewRegistry(), logs: new(bytes.Buffer),
		clock: &fakeClock{t: time.Date(2026, 3, 9, 14, 44, 26, 0, time.UTC)}}
	log := slog.New(slog.NewTextHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	base := []Option{WithRegisterer(f.reg), WithLogger(log), WithClock(f.clock.now), withSleep(f.clock.sleep)}
	h, err := NewHandler(testSecrets(), f.sink, append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	f.h = h
	return f
}

func (f *fixture) serve(req *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, req)
	return rec
}

// counts are the handler's non-zero counters, as "kind/outcome", read with
// testutil.
func (f *fixture) counts() map[string]float64 {
	out := make(map[string]float64)
	for _, kind := range Kinds() {
		for _, o := range outcomes {
			if v := testutil.ToFloat64(f.h.events.WithLabelValues(kind, o)); v != 0 {
				out[kind+"/"+o] = v
			}
		}
	}
	return out
}

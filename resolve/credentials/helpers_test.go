package credentials

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/argocd-image-resolver/argocd-image-resolver/internal/testio"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

var fastRetry = resolve.RetryPolicy{Attempts: 2, Backoff: 10 * time.Millisecond, MaxWait: time.Second}

// clock is a settable clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Now()} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// newRegistry starts a registry with opts and two tags of team/app.
func newRegistry(t *testing.T, opts ...rt.Option) *rt.Server {
	t.Helper()
	s := rt.New(t, opts...)
	for i, tag := range []string{"1.0.0", "1.1.0"} {
		s.Push(t, "team/app", tag, rt.Image(t0.Add(time.Duration(i)*time.Hour), "linux/amd64", rt.WithSeed(tag)))
	}
	return s
}

// env is what a test built: the Remote, its keychain, and the captured log.
type env struct {
	remote *resolve.Remote
	kc     *Keychain
	cfgs   []resolve.RegistryConfig
	logs   *testio.SyncBuffer
}

// newEnv parses registries YAML and builds a Remote with a Keychain over it.
func newEnv(t *testing.T, yaml string, opts ...Option) *env {
	t.Helper()
	cfgs, err := resolve.ParseRegistries("registries.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	logs := &testio.SyncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	kc, err := New(cfgs, append([]Option{WithLogger(log), WithFallback(authn.NewMultiKeychain())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	remote, err := resolve.NewRemote(resolve.WithRegistries(cfgs), resolve.WithKeychain(kc), resolve.WithRetry(fastRetry))
	if err != nil {
		t.Fatal(err)
	}
	return &env{remote: remote, kc: kc, cfgs: cfgs, logs: logs}
}

// resolve resolves image for app through the batch API (the path generate takes)
// with newest-build and a platform, so that tags, manifests and configs are read.
func (e *env) resolve(t *testing.T, app, image string) resolve.Answer {
	t.Helper()
	r := resolve.NewResolver(e.remote, resolve.WithAuthorizer(resolve.NewRegistryTable(e.cfgs).Authorize))
	answers, err := r.ResolveBatch(context.Background(), app, []resolve.Request{{Image: image,
		Policy: resolve.PolicySpec{Strategy: "newest-build", Platforms: []string{"linux/amd64"}}}})
	if err != nil {
		t.Fatal(err)
	}
	return answers[0]
}

// noSecrets fails when any secret appears in any of the channels.
func noSecrets(t *testing.T, secrets []string, channels map[string]string) {
	t.Helper()
	for ch, text := range channels {
		for _, s := range secrets {
			if s != "" && strings.Contains(text, s) {
				t.Errorf("%s leaks secret %q:\n%s", ch, s, text)
			}
		}
	}
}

// channels gathers every output channel of a resolution: the error, the answer
// as JSON (what crosses the daemon's socket and what --output json prints), the
// rebuilt error, and the log.
func (e *env) channels(a resolve.Answer) map[string]string {
	b, _ := json.Marshal(a)
	ch := map[string]string{"answer JSON": string(b), "log": e.logs.String()}
	if err := a.Err(); err != nil {
		ch["error"] = err.Error()
		ch["error %+v"] = fmt.Sprintf("%+v", err)
	}
	if a.Result != nil {
		var text bytes.Buffer
		_ = a.Result.WriteText(&text, true)
		ch["explain"] = text.String()
	}
	return ch
}

// script writes an executable shell script.
func script(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "creds.sh")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// runs counts the lines a script appended to a file (one per run).
func runs(t *testing.T, file string) int {
	t.Helper()
	b, err := os.ReadFile(file)
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

func dockerConfigJSON(host, user, pass string) []byte {
	b, _ := json.Marshal(map[string]any{"auths": map[string]any{
		host: map[string]string{"auth": base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))},
	}})
	return b
}

// kubeAPI is a loopback Kubernetes API server serving secrets.
type kubeAPI struct {
	*httptest.Server
	mu      sync.Mutex
	secrets map[string]*corev1.Secret // "ns/name"
	gets    atomic.Int32
}

func newKubeAPI(t *testing.T) *kubeAPI {
	k := &kubeAPI{secrets: map[string]*corev1.Secret{}}
	k.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		var ns, name string
		if _, err := fmt.Sscanf(strings.ReplaceAll(r.URL.Path, "/", " "), " api v1 namespaces %s secrets %s", &ns, &name); err != nil || r.Method != http.MethodGet {
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
				Status: "Failure", Code: 404, Reason: metav1.StatusReasonNotFound, Message: "not found"})
			return
		}
		k.gets.Add(1)
		k.mu.Lock()
		s := k.secrets[ns+"/"+name]
		k.mu.Unlock()
		if s == nil {
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
				Status: "Failure", Code: 404, Reason: metav1.StatusReasonNotFound,
				Message: fmt.Sprintf("secrets %q not found", name),
				Details: &metav1.StatusDetails{Name: name, Kind: "secrets"}})
			return
		}
		_ = json.NewEncoder(w).Encode(s)
	}))
	t.Cleanup(k.Close)
	return k
}

func (k *kubeAPI) put(ns, name string, typ corev1.SecretType, data map[string][]byte) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.secrets[ns+"/"+name] = &corev1.Secret{TypeMeta: metav1.TypeMeta{Kind: "Secret", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Type: typ, Data: data}
}

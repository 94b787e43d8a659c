package notify

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/argocd-image-resolver/argocd-image-resolver/internal/kubeapi"
	"github.com/argocd-image-resolver/argocd-image-resolver/internal/testtls"
)

const testToken = "sa-token-5b1e9c77"

const appPath = "/apis/argoproj.io/v1alpha1/namespaces/argocd/applications/web"

// apiServer is a Kubernetes API server over TLS that requires the bearer token
// and serves the Application argocd/web as JSON; get and patch, when set,
// answer those requests instead.
type apiServer struct {
	*httptest.Server
	cfg          *rest.Config
	gets, patchs atomic.Int32
	get, patch   http.HandlerFunc
}

func newAPIServer(t *testing.T) *apiServer {
	t.Helper()
	certs, err := testtls.New("kube-apiserver")
	if err != nil {
		t.Fatal(err)
	}
	a := &apiServer{}
	a.Server = httptest.NewUnstartedServer(http.HandlerFunc(a.serve))
	a.TLS = &tls.Config{Certificates: []tls.Certificate{certs.Server}}
	a.StartTLS()
	t.Cleanup(a.Close)
	a.cfg = &rest.Config{Host: a.URL, BearerToken: testToken, TLSClientConfig: rest.TLSClientConfig{CAData: certs.CAPEM()}}
	return a
}

func (a *apiServer) serve(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+testToken {
		status(w, http.StatusUnauthorized, "Unauthorized")
		return
	}
	if r.URL.Path != appPath {
		status(w, http.StatusNotFound, "NotFound")
		return
	}
	switch r.Method {
	case http.MethodGet:
		a.gets.Add(1)
		if a.get != nil {
			a.get(w, r)
			return
		}
	case http.MethodPatch:
		a.patchs.Add(1)
		if a.patch != nil {
			a.patch(w, r)
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprint(w, `{"apiVersion":"argoproj.io/v1alpha1","kind":"Application","metadata":{"namespace":"argocd","name":"web"}}`)
}

func status(w http.ResponseWriter, code int, reason string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"apiVersion": "v1", "kind": "Status", "status": "Failure",
		"code": code, "reason": reason, "message": strings.ToLower(reason)})
}

// otherHost is a server on another host name (localhost, where the API server
// is 127.0.0.1) that records what it is sent and answers with code.
type otherHost struct {
	*httptest.Server
	mu    sync.Mutex
	seen  []string // method path authorization
	count atomic.Int32
}

func newOtherHost(t *testing.T, code int) *otherHost {
	o := &otherHost{}
	o.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.count.Add(1)
		o.mu.Lock()
		o.seen = append(o.seen, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization"))
		o.mu.Unlock()
		if code == http.StatusNotFound {
			status(w, code, "NotFound")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"apiVersion":"argoproj.io/v1alpha1","kind":"Application","metadata":{"namespace":"argocd","name":"web"}}`)
	}))
	t.Cleanup(o.Close)
	return o
}

func (o *otherHost) url() string {
	return strings.Replace(o.URL, "127.0.0.1", "localhost", 1) + appPath
}

func TestRedirectIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name       string
		method     string // the request the API server redirects
		code       int    // what the other host answers
		gets, pats int32  // requests the API server sees
	}{
		{name: "get to another host", method: http.MethodGet, code: http.StatusOK, gets: 1},
		{name: "get to a 404", method: http.MethodGet, code: http.StatusNotFound, gets: 1},
		{name: "patch to another host", method: http.MethodPatch, code: http.StatusOK, gets: 1, pats: 1},
		{name: "patch to a 404", method: http.MethodPatch, code: http.StatusNotFound, gets: 1, pats: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api, other := newAPIServer(t), newOtherHost(t, tc.code)
			redirect := func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, other.url(), http.StatusTemporaryRedirect)
			}
			if tc.method == http.MethodGet {
				api.get = redirect
			} else {
				api.patch = redirect
			}
			k, err := NewKubernetes(api.cfg)
			if err != nil {
				t.Fatal(err)
			}
			requested, err := k.HardRefresh(context.Background(), App{Namespace: "argocd", Name: "web"})
			if err == nil || requested {
				t.Fatalf("HardRefresh = %v, %v; want an error", requested, err)
			}
			if errors.Is(err, ErrAppGone) {
				t.Errorf("a redirect was taken for the app being gone: %v", err)
			}
			if !errors.Is(err, kubeapi.ErrRedirect) || !strings.Contains(err.Error(), other.url()) ||
				!strings.Contains(err.Error(), "argocd/web") {
				t.Errorf("error %q: want one naming the application and the redirect to %s", err, other.url())
			}
			if strings.Contains(err.Error(), testToken) {
				t.Errorf("error holds the token: %v", err)
			}
			other.mu.Lock()
			defer other.mu.Unlock()
			if n := other.count.Load(); n != 0 {
				t.Errorf("the other host got %d requests (%q); want none", n, other.seen)
			}
			if g, p := api.gets.Load(), api.patchs.Load(); g != tc.gets || p != tc.pats {
				t.Errorf("API server got %d gets, %d patches; want %d, %d", g, p, tc.gets, tc.pats)
			}
		})
	}
}

// streamApp answers an Application whose annotation goes on for size bytes,
// written 64 KiB at a time (never held whole); announce sets Content-Length.
// sent counts the bytes the client took.
func streamApp(size int64, announce bool, sent *atomic.Int64) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if announce {
			w.Header().Set("Content-Length", fmt.Sprint(size))
		}
		head := `{"apiVersion":"argoproj.io/v1alpha1","kind":"Application","metadata":{"name":"web","annotations":{"a":"`
		n, err := io.WriteString(w, head)
		sent.Add(int64(n))
		chunk := []byte(strings.Repeat("x", 64<<10))
		for left := size - int64(n); left > 0 && err == nil; left -= int64(n) {
			n, err = w.Write(chunk[:min(int64(len(chunk)), left)])
			sent.Add(int64(n))
		}
	}
}

func TestHugeAnswerIsCut(t *testing.T) {
	const size = 3 << 30 // 3 GiB
	for _, tc := range []struct {
		name     string
		announce bool
	}{
		{name: "3 GiB streamed", announce: false},
		{name: "3 GiB announced", announce: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := newAPIServer(t)
			var sent atomic.Int64
			api.get = streamApp(size, tc.announce, &sent)
			k, err := NewKubernetes(api.cfg)
			if err != nil {
				t.Fatal(err)
			}
			peak := watchHeap(t)
			start := time.Now()
			_, err = k.HardRefresh(context.Background(), App{Namespace: "argocd", Name: "web"})
			took := time.Since(start)
			heap := peak()
			t.Logf("%s: error after %v, heap peak %d MiB over the start, client took %d MiB, VmHWM %s",
				tc.name, took.Round(time.Millisecond), heap>>20, sent.Load()>>20, procStatus("VmHWM"))
			if !errors.Is(err, kubeapi.ErrBodyTooLarge) || !strings.Contains(err.Error(), "16 MiB") || !strings.Contains(err.Error(), "argocd/web") {
				t.Errorf("error %v: want one naming the application and the 16 MiB bound", err)
			}
			if errors.Is(err, ErrAppGone) {
				t.Errorf("a cut answer was taken for the app being gone: %v", err)
			}
			if took > 5*time.Second {
				t.Errorf("the error took %v; want under 5 s", took)
			}
			if heap > 128<<20 {
				t.Errorf("heap grew by %d MiB; want under 128 MiB", heap>>20)
			}
			if api.patchs.Load() != 0 {
				t.Errorf("patched after a cut answer")
			}
		})
	}
}

// watchHeap samples the heap in use every millisecond until the returned
// function is called, which gives the peak over the heap at the start.
func watchHeap(t *testing.T) func() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base, peak := ms.HeapAlloc, ms.HeapAlloc
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapAlloc)
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	return func() uint64 {
		close(stop)
		<-done
		return peak - base
	}
}

// procStatus is one field of /proc/self/status ("VmHWM"), or "?".
func procStatus(field string) string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "?"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

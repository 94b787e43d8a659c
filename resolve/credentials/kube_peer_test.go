package credentials

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/argocd-image-resolver/argocd-image-resolver/internal/kubeapi"
)

// TestKubeAPIIsAPeer reads a pull secret from an API server that redirects to
// another host or answers without end: the token never leaves the API server
// and the answer is cut at kubeapi.MaxBody.
func TestKubeAPIIsAPeer(t *testing.T) {
	const token = "sa-token-0d4f"
	var elsewhere atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere.Add(1)
		if strings.Contains(r.Header.Get("Authorization"), token) {
			t.Errorf("the other host was sent the token")
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"regcred"}}`)
	}))
	defer other.Close()
	target := strings.Replace(other.URL, "127.0.0.1", "localhost", 1) + "/api/v1/namespaces/argocd/secrets/regcred"
	for _, tc := range []struct {
		name   string
		serve  http.HandlerFunc
		errIs  error
		errHas string
	}{
		{name: "redirect", errIs: kubeapi.ErrRedirect, errHas: target, serve: func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, target, http.StatusFound)
		}},
		{name: "endless answer", errIs: kubeapi.ErrBodyTooLarge, errHas: "16 MiB", serve: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"`)
			chunk := []byte(strings.Repeat("x", 64<<10))
			for i := 0; i < 3<<14; i++ { // 3 GiB at most, until the client hangs up
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			elsewhere.Store(0)
			var gets atomic.Int32
			api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				gets.Add(1)
				tc.serve(w, r)
			}))
			defer api.Close()
			k, err := New(nil, WithKubernetesConfig(&rest.Config{Host: api.URL, BearerToken: token}))
			if err != nil {
				t.Fatal(err)
			}
			_, err = k.getSecret(context.Background(), "argocd", "regcred")
			if !errors.Is(err, tc.errIs) || !strings.Contains(err.Error(), tc.errHas) || strings.Contains(err.Error(), token) {
				t.Errorf("error %v: want %v naming %q, without the token", err, tc.errIs, tc.errHas)
			}
			if gets.Load() != 1 || elsewhere.Load() != 0 {
				t.Errorf("API server got %d requests, the other host %d; want 1, 0", gets.Load(), elsewhere.Load())
			}
		})
	}
}

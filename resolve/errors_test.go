package resolve_test

import (
	"cmp"
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	rt "github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// A registry error names the image as written; when a registries entry reads it
// from another address (api:), that address too, since the wrapped error names
// only the address, which is in no manifest.
func TestRegistryErrorNamesTheWrittenImage(t *testing.T) {
	s := rt.New(t)
	pushTags(t, s, "demo/web", "1.0.0", "1.2.0")
	s.Push(t, "demo/web", "2.0.0", rt.Image(day(3), "linux/amd64", rt.WithSeed("2.0.0")))
	config := configDigest(t, s, "demo/web", "2.0.0")
	down := closedAddr(t)
	for _, tt := range []struct {
		name   string
		api    string // the registries entry's api for registry.demo.local; "" for none
		image  string
		spec   resolve.PolicySpec
		fault  *rt.Fault
		prefix string // the message's start; ADDR stands for api
	}{
		{name: "registry down, through an entry", api: down, image: "registry.demo.local/demo/web",
			prefix: "list tags of registry.demo.local/demo/web (via ADDR): Get \"https://ADDR/v2/\": "},
		{name: "registry down, written as its address", image: down + "/demo/web",
			prefix: "list tags of ADDR/demo/web: Get \"https://ADDR/v2/\": "},
		{name: "head of the chosen tag", api: s.Host, image: "registry.demo.local/demo/web:~1.2",
			fault:  &rt.Fault{Kind: rt.ManifestHead, Status: http.StatusNotFound, Times: 4},
			prefix: "head manifest of registry.demo.local/demo/web:1.2.0 (via ADDR): "},
		{name: "manifest of a candidate", api: s.Host, image: "registry.demo.local/demo/web",
			spec:   resolve.PolicySpec{Platforms: []string{"linux/amd64"}},
			fault:  &rt.Fault{Kind: rt.ManifestGet, PathContains: "2.0.0", Status: http.StatusNotFound, Times: 4},
			prefix: "get manifest of registry.demo.local/demo/web:2.0.0 (via ADDR): "},
		{name: "config blob", api: s.Host, image: "registry.demo.local/demo/web",
			spec:   resolve.PolicySpec{Strategy: "newest-build"},
			fault:  &rt.Fault{Kind: rt.BlobGet, PathContains: config, Status: http.StatusNotFound, Times: 4},
			prefix: "get blob of registry.demo.local/demo/web@" + config + " (via ADDR): "},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var opts []resolve.RemoteOption
			if tt.api != "" {
				opts = append(opts, resolve.WithRegistries([]resolve.RegistryConfig{{Prefix: "registry.demo.local", API: tt.api, Insecure: true}}))
			}
			if tt.fault != nil {
				s.Inject(*tt.fault)
				t.Cleanup(s.ClearFaults)
			}
			repo, written, constraint, err := resolve.ParseImageSpec(tt.image)
			if err != nil {
				t.Fatal(err)
			}
			if constraint != "" {
				tt.spec.Constraint = constraint
			}
			p, err := tt.spec.Compile()
			if err != nil {
				t.Fatal(err)
			}
			reg, err := resolve.NewRemote(append(opts, resolve.WithRetry(fastRetry), resolve.WithKeychain(authn.NewMultiKeychain()))...)
			if err != nil {
				t.Fatal(err)
			}
			_, err = resolve.NewResolver(reg).Resolve(context.Background(), repo, written, p)
			addr := cmp.Or(tt.api, down)
			want := strings.ReplaceAll(tt.prefix, "ADDR", addr)
			var re *resolve.RegistryError
			if !errors.As(err, &re) || !strings.HasPrefix(err.Error(), want) {
				t.Fatalf("err = %v\nwant a *RegistryError starting %q", err, want)
			}
			if re.Via != tt.api {
				t.Errorf("Via = %q, want %q", re.Via, tt.api)
			}
		})
	}
}

// A RegistryError is one line, bounded, with the secrets the process holds
// redacted, whatever the registry wrote; so is one rebuilt from a daemon's answer.
func TestRegistryErrorIsOneBoundedLine(t *testing.T) {
	const secret = "registry-password-42"
	resolve.DefaultRedactor.Add(secret)
	body := "denied: " + secret + "\n\x1b]0;title\x07" + strings.Repeat("y", 10<<10)
	err := error(&resolve.RegistryError{Op: "get manifest", Image: "ghcr.io/org/app:1.0", Via: "10.0.0.5:5000", Err: errors.New(body)})
	msg := err.Error()
	prefix := "get manifest of ghcr.io/org/app:1.0 (via 10.0.0.5:5000): denied: " + resolve.Redacted + " "
	if !strings.HasPrefix(msg, prefix) {
		t.Errorf("message %.200q, want it to start %q", msg, prefix)
	}
	assertCleanLine(t, msg, len("get manifest of ghcr.io/org/app:1.0 (via 10.0.0.5:5000): ")+resolve.MaxRegistryText, secret, "\x1b", "\x07", "\n")
	rebuilt := resolve.Answer{Error: body, ErrorKind: resolve.KindRegistry}.Err()
	assertCleanLine(t, rebuilt.Error(), 4*resolve.MaxRegistryText, secret, "\x1b", "\n")
}

package resolve_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

type redactKeychain struct{ user, pass string }

func (k redactKeychain) Resolve(authn.Resource) (authn.Authenticator, error) {
	return authn.FromConfig(authn.AuthConfig{Username: k.user, Password: k.pass}), nil
}

// assertCleanLine fails unless msg is one line of printable text, at most max
// bytes, holding none of secrets.
func assertCleanLine(t *testing.T, msg string, max int, secrets ...string) {
	t.Helper()
	if len(msg) > max {
		t.Errorf("message of %d bytes, want at most %d", len(msg), max)
	}
	if !utf8.ValidString(msg) {
		t.Errorf("message is not UTF-8: %q", msg)
	}
	for _, c := range msg {
		if unicode.IsControl(c) || unicode.Is(unicode.Cf, c) {
			t.Errorf("message holds control character %U: %q", c, msg)
			break
		}
	}
	for _, s := range secrets {
		if strings.Contains(msg, s) {
			t.Errorf("message holds secret %q: %q", s, msg)
		}
	}
}

// A registry's error body holding the password, the bearer token it gave, the
// Basic header, an ANSI escape, newlines and 10 KiB of text: the error (and the
// Answer an app's condition is made of) is one bounded line with no secret.
func TestRegistryErrorBodyIsRedacted(t *testing.T) {
	const user, pass, token = "robot", "pa55-w0rd-s3cret", "tok-0123456789abcdef"
	basic := base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/token":
			if u, p, ok := r.BasicAuth(); !ok || u != user || p != pass {
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			fmt.Fprintf(w, `{"token":%q}`, token)
		case r.Header.Get("Authorization") != "Bearer "+token:
			w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm="%s/token",service="test"`, srv.URL))
			w.WriteHeader(http.StatusUnauthorized)
		case r.URL.Path == "/v2/":
			w.WriteHeader(http.StatusOK)
		default:
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprintf(w, "oops\x1b[31m password=%s\r\ntoken=%s basic=%s \u202eevil\x00\x07 %s",
				pass, token, basic, strings.Repeat("x", 10<<10))
		}
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")

	reg, err := resolve.NewRemote(resolve.WithTransport(http.DefaultTransport), /* NewRemote registers what it sends */
		resolve.WithKeychain(redactKeychain{user, pass}), resolve.WithRetry(resolve.RetryPolicy{Attempts: 1}))
	if err != nil {
		t.Fatal(err)
	}
	repo, err := name.NewRepository(host+"/app", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	_, err = reg.ListTags(context.Background(), repo)
	var re *resolve.RegistryError
	if !errors.As(err, &re) {
		t.Fatalf("err = %v, want a *RegistryError", err)
	}
	msg := err.Error()
	prefix := "list tags of " + host + "/app: "
	if !strings.HasPrefix(msg, prefix) || !strings.Contains(msg, "500") || !strings.Contains(msg, resolve.Redacted) {
		t.Errorf("message %q: want it to start %q, name the status and show redactions", msg, prefix)
	}
	secrets := []string{pass, token, basic, "\x1b", "\r", "\n"}
	assertCleanLine(t, msg, len(prefix)+resolve.MaxRegistryText, secrets...)
	ans := resolve.AnswerOf(nil, err)
	assertCleanLine(t, ans.Error, len(prefix)+resolve.MaxRegistryText, secrets...)
	assertCleanLine(t, ans.Err().Error(), len(prefix)+resolve.MaxRegistryText, secrets...)
	if !strings.Contains(msg, `\x1b[31m`) || !strings.Contains(msg, `\u202e`) {
		t.Errorf("escapes not shown escaped: %q", msg)
	}
}

func TestRedact(t *testing.T) {
	for _, tt := range []struct {
		s       string
		secrets []string
		want    string
	}{
		{"user pw1234 ok", []string{"pw1234"}, "user [REDACTED] ok"},
		{"a abc b", []string{"abc"}, "a abc b"}, // shorter than MinSecretLength
		{"xx secret-long yy secret", []string{"secret", "secret-long"}, "xx [REDACTED] yy [REDACTED]"},
		{"nothing", nil, "nothing"},
	} {
		if got := resolve.Redact(tt.s, tt.secrets...); got != tt.want {
			t.Errorf("Redact(%q, %q) = %q, want %q", tt.s, tt.secrets, got, tt.want)
		}
	}
}

func TestRedactor(t *testing.T) {
	r := resolve.NewRedactor()
	r.Add("abc", "p@ss word/1")
	r.AddAuthorization("Basic " + base64.StdEncoding.EncodeToString([]byte("robot:hunter22")))
	r.AddAuthorization("Bearer eyJhbGciOi.token.sig")
	r.AddAuthConfig(&authn.AuthConfig{IdentityToken: "refresh-me-please"})
	in := "abc p@ss word/1 p%40ss+word%2F1 robot:hunter22 hunter22 " + base64.StdEncoding.EncodeToString([]byte("robot:hunter22")) +
		" eyJhbGciOi.token.sig refresh-me-please"
	got := r.Redact(in)
	if want := "abc" + strings.Repeat(" "+resolve.Redacted, 7); got != want {
		t.Errorf("Redact:\n got %q\nwant %q", got, want)
	}
	// The oldest secrets are forgotten when many are added: bounded memory.
	r = resolve.NewRedactor()
	for i := range 2000 {
		r.Add(fmt.Sprintf("token-%04d", i))
	}
	if got := r.Redact("token-0000 token-1999"); got != "token-0000 "+resolve.Redacted {
		t.Errorf("after 2000 tokens: %q", got)
	}
	// Wrapped authenticators register what they give.
	r = resolve.NewRedactor()
	if _, err := r.Authenticator(authn.FromConfig(authn.AuthConfig{Username: "u", Password: "from-keychain"})).Authorization(); err != nil {
		t.Fatal(err)
	}
	if got := r.Redact("x from-keychain"); got != "x "+resolve.Redacted {
		t.Errorf("authenticator's password not registered: %q", got)
	}
	if r.Authenticator(authn.Anonymous) != authn.Anonymous {
		t.Error("anonymous wrapped: go-containerregistry would stop treating it as anonymous")
	}
}

func TestOneLineAndTruncate(t *testing.T) {
	s := "a\x1b[31mred\x1b[0m\r\nnext\tline\x00\x7f\u202e\u0085 \xff end é"
	got := resolve.OneLine(s)
	assertCleanLine(t, got, 200)
	if want := `a\x1b[31mred\x1b[0m  next line\x00\x7f\u202e\u0085 ` + "\uFFFD end é"; got != want {
		t.Errorf("OneLine = %q, want %q", got, want)
	}
	if resolve.OneLine("plain text") != "plain text" {
		t.Error("plain text changed")
	}
	long := strings.Repeat("é", 1000)
	tr := resolve.Truncate(long, 101)
	if len(tr) > 101 || !utf8.ValidString(tr) || !strings.HasSuffix(tr, "... (2000 bytes)") {
		t.Errorf("Truncate = %q (%d bytes)", tr, len(tr))
	}
	if resolve.Truncate("short", 10) != "short" {
		t.Error("short text truncated")
	}
}

package resolve

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/google/go-containerregistry/pkg/authn"
)

// Text from registries (error bodies, messages) is not trusted: before it reaches
// a log, an error or an app's condition it is redacted of every credential value
// the client holds, made one line (no control characters: an Argo CD condition is
// one line, a terminal must not see escapes) and truncated.

// MinSecretLength is the length below which a secret is not redacted: a short
// value would blank out ordinary words of every message.
const MinSecretLength = 4

// MaxRegistryText bounds the registry's part of an error message, in bytes.
const MaxRegistryText = 512

// MaxErrorBody bounds how much of an error answer's body the registry client
// reads (Redactor.Transport); the message keeps at most MaxRegistryText of it.
const MaxErrorBody = 64 << 10

// Redacted replaces a secret in text.
const Redacted = "[REDACTED]"

// maxSecrets bounds the secrets a Redactor keeps: tokens are renewed every few
// minutes; the oldest are forgotten first.
const maxSecrets = 512

// Redactor holds the credential values a registry client sent, to redact them
// from what registries answer. It is safe for concurrent use.
type Redactor struct {
	mu      sync.RWMutex
	secrets []string // oldest first
	set     map[string]bool
	byLen   []string // secrets, longest first; nil: to sort again
}

// NewRedactor returns an empty Redactor.
func NewRedactor() *Redactor { return &Redactor{set: map[string]bool{}} }

// DefaultRedactor is the process-wide Redactor: RegistryError's message is
// redacted with it, and the registry client registers there what it sends
// (Transport, Authenticator).
var DefaultRedactor = NewRedactor()

// Add registers secrets (and their URL- and JSON-escaped spellings, as a registry
// may echo them); values shorter than MinSecretLength are ignored.
func (r *Redactor) Add(secrets ...string) {
	var all []string
	for _, s := range secrets {
		if len(s) < MinSecretLength {
			continue
		}
		all = append(all, s, url.QueryEscape(s), url.PathEscape(s))
		if j, err := json.Marshal(s); err == nil {
			all = append(all, string(j[1:len(j)-1]))
		}
	}
	if len(all) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range all {
		if r.set[s] {
			continue
		}
		r.set[s] = true
		r.secrets = append(r.secrets, s)
		r.byLen = nil
	}
	if n := len(r.secrets) - maxSecrets; n > 0 {
		for _, s := range r.secrets[:n] {
			delete(r.set, s)
		}
		r.secrets = slices.Clone(r.secrets[n:])
	}
}

// AddAuthorization registers the credentials of an Authorization header value:
// a Basic header's encoded value, its decoded user:password and the password; a
// Bearer (or other scheme's) token.
func (r *Redactor) AddAuthorization(header string) {
	scheme, cred, ok := strings.Cut(strings.TrimSpace(header), " ")
	if !ok {
		r.Add(scheme)
		return
	}
	cred = strings.TrimSpace(cred)
	r.Add(cred)
	if strings.EqualFold(scheme, "basic") {
		if dec, err := base64.StdEncoding.DecodeString(cred); err == nil {
			_, pass, _ := strings.Cut(string(dec), ":")
			r.Add(string(dec), pass)
		}
	}
}

// AddAuthConfig registers the secrets of a credential: password, auth, identity
// and registry tokens (not the user name).
func (r *Redactor) AddAuthConfig(c *authn.AuthConfig) {
	if c == nil {
		return
	}
	r.Add(c.Password, c.IdentityToken, c.RegistryToken)
	if c.Auth != "" {
		r.AddAuthorization("Basic " + c.Auth)
	}
}

// Redact replaces every registered secret in s with Redacted.
func (r *Redactor) Redact(s string) string {
	r.mu.RLock()
	byLen := r.byLen
	r.mu.RUnlock()
	if byLen == nil {
		r.mu.Lock()
		if r.byLen == nil {
			r.byLen = slices.Clone(r.secrets)
			slices.SortStableFunc(r.byLen, func(a, b string) int { return len(b) - len(a) })
		}
		byLen = r.byLen
		r.mu.Unlock()
	}
	return Redact(s, byLen...)
}

// Clean is Redact, then OneLine, then Truncate to max bytes: registry text made
// fit for a message.
func (r *Redactor) Clean(s string, max int) string {
	return Truncate(OneLine(r.Redact(s)), max)
}

// Redact returns s with every one of secrets (those at least MinSecretLength
// long) replaced with Redacted, longest first so that a secret holding another is
// redacted whole.
func Redact(s string, secrets ...string) string {
	ss := slices.DeleteFunc(slices.Clone(secrets), func(x string) bool { return len(x) < MinSecretLength })
	slices.SortStableFunc(ss, func(a, b string) int { return len(b) - len(a) })
	for _, x := range ss {
		if strings.Contains(s, x) {
			s = strings.ReplaceAll(s, x, Redacted)
		}
	}
	return s
}

// OneLine makes s one printable line: newlines and tabs become spaces, other
// control and format characters (ANSI escapes, bidi overrides) are written
// escaped (\x1b, \u202e), invalid UTF-8 becomes U+FFFD.
func OneLine(s string) string {
	clean := true
	for _, c := range s {
		if c == utf8.RuneError || unicode.IsControl(c) || unicode.Is(unicode.Cf, c) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for _, c := range strings.ToValidUTF8(s, "\uFFFD") {
		switch {
		case c == '\n' || c == '\r' || c == '\t':
			b.WriteByte(' ')
		case c < 0x80 && unicode.IsControl(c):
			fmt.Fprintf(&b, `\x%02x`, c)
		case unicode.IsControl(c) || unicode.Is(unicode.Cf, c):
			fmt.Fprintf(&b, `\u%04x`, c)
		default:
			b.WriteRune(c)
		}
	}
	return b.String()
}

// Truncate cuts s to at most max bytes (on a character boundary), saying how long
// it was.
func Truncate(s string, max int) string {
	if len(s) <= max {
		return s
	}
	suffix := fmt.Sprintf("... (%d bytes)", len(s))
	cut := max - len(suffix)
	if cut < 0 {
		cut = 0
	}
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + suffix
}

// CleanRegistryText is registry text made fit for a log or a message: redacted with
// DefaultRedactor, one line, at most MaxRegistryText bytes.
func CleanRegistryText(s string) string { return DefaultRedactor.Clean(s, MaxRegistryText) }

// Transport wraps a registry client's transport: the credentials of every
// request's Authorization header are registered, and the body of an error answer
// (status 400 and above) reads at most MaxErrorBody bytes.
func (r *Redactor) Transport(next http.RoundTripper) http.RoundTripper {
	return redactingTransport{r: r, next: next}
}

type redactingTransport struct {
	r    *Redactor
	next http.RoundTripper
}

func (t redactingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	for _, h := range req.Header.Values("Authorization") {
		t.r.AddAuthorization(h)
	}
	if pass, ok := req.URL.User.Password(); ok {
		t.r.Add(pass)
	}
	resp, err := t.next.RoundTrip(req)
	if err == nil && resp.StatusCode >= 400 && resp.Body != nil {
		resp.Body = limitedBody{Reader: io.LimitReader(resp.Body, MaxErrorBody), Closer: resp.Body}
		if resp.ContentLength > MaxErrorBody {
			resp.ContentLength = -1
		}
	}
	return resp, err
}

type limitedBody struct {
	io.Reader
	io.Closer
}

// Authenticator wraps a: the secrets of every credential it gives are registered.
func (r *Redactor) Authenticator(a authn.Authenticator) authn.Authenticator {
	if a == nil || a == authn.Anonymous {
		return a
	}
	return redactingAuthenticator{r: r, a: a}
}

type redactingAuthenticator struct {
	r *Redactor
	a authn.Authenticator
}

func (ra redactingAuthenticator) Authorization() (*authn.AuthConfig, error) {
	return ra.AuthorizationContext(context.Background())
}

// AuthorizationContext keeps a's context (authn.ContextAuthenticator) when it has one.
func (ra redactingAuthenticator) AuthorizationContext(ctx context.Context) (*authn.AuthConfig, error) {
	c, err := authn.Authorization(ctx, ra.a)
	ra.r.AddAuthConfig(c)
	return c, err
}

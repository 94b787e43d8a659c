package webhook

import (
	"net/http"
	"testing"
)

func TestAuthorizedByHeaders(t *testing.T) {
	sec := newSecret([]byte("0123456789abcdef"))
	for _, c := range []struct {
		name   string
		scheme authScheme
		auth   string // the Authorization header
		token  string
		want   bool
	}{
		{"bearer", authBearer, "Bearer 0123456789abcdef", "", true},
		{"bearer, scheme in any case", authBearer, "BEARER 0123456789abcdef", "", true},
		{"bearer, wrong", authBearer, "Bearer 0123456789abcdeX", "", false},
		{"bearer, a prefix of the secret", authBearer, "Bearer 0123456789", "", false},
		{"bearer, longer", authBearer, "Bearer 0123456789abcdef0", "", false},
		{"bearer, raw", authBearer, "0123456789abcdef", "", false},
		{"bearer, basic", authBearer, "Basic 0123456789abcdef", "", false},
		{"bearer, empty", authBearer, "Bearer ", "", false},
		{"bearer ignores a path token", authBearer, "", "0123456789abcdef", false},
		{"harbor raw", authHarbor, "0123456789abcdef", "", true},
		{"harbor bearer", authHarbor, "Bearer 0123456789abcdef", "", true},
		{"harbor wrong", authHarbor, "0123456789abcdeX", "", false},
		{"harbor none", authHarbor, "", "", false},
		{"token", authTokenOrBearer, "", "0123456789abcdef", true},
		{"token wrong, bearer right", authTokenOrBearer, "Bearer 0123456789abcdef", "nope", true},
		{"token wrong", authTokenOrBearer, "Bearer nope", "0123456789abcdeX", false},
		{"token, raw header", authTokenOrBearer, "0123456789abcdef", "", false},
		{"signing schemes never by headers", authHubSignature, "Bearer 0123456789abcdef", "0123456789abcdef", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := http.Header{}
			if c.auth != "" {
				h.Set("Authorization", c.auth)
			}
			if got := c.scheme.authorizedByHeaders(sec, h, c.token); got != c.want {
				t.Errorf("got %v, want %v", got, c.want)
			}
		})
	}
}

func TestAuthorizedBody(t *testing.T) {
	const key = "0123456789abcdef"
	sec := newSecret([]byte(key))
	body := []byte(`{"action":"published"}`)
	good := hmacHex(key, body)
	for _, c := range []struct {
		name   string
		scheme authScheme
		header http.Header
		want   bool
	}{
		{"github", authHubSignature, hdr("X-Hub-Signature-256", "sha256="+good), true},
		{"github, upper-case hex", authHubSignature, hdr("X-Hub-Signature-256", "sha256="+upper(good)), true},
		{"github, no prefix", authHubSignature, hdr("X-Hub-Signature-256", good), false},
		{"github, sha1 header", authHubSignature, hdr("X-Hub-Signature", "sha1="+good), false},
		{"github, gitea header", authHubSignature, hdr("X-Gitea-Signature", good), false},
		{"github, wrong key", authHubSignature, hdr("X-Hub-Signature-256", "sha256="+hmacHex("another key 01234", body)), false},
		{"github, not hex", authHubSignature, hdr("X-Hub-Signature-256", "sha256=zz"), false},
		{"github, truncated", authHubSignature, hdr("X-Hub-Signature-256", "sha256="+good[:32]), false},
		{"github, none", authHubSignature, hdr(), false},
		{"gitea", authGiteaSignature, hdr("X-Gitea-Signature", good), true},
		{"forgejo", authGiteaSignature, hdr("X-Forgejo-Signature", good), true},
		{"gitea, hub header", authGiteaSignature, hdr("X-Hub-Signature-256", "sha256="+good), true},
		{"gitea, one wrong one right", authGiteaSignature, hdr("X-Gitea-Signature", "00", "X-Forgejo-Signature", good), true},
		{"gitea, wrong", authGiteaSignature, hdr("X-Gitea-Signature", hmacHex("another key 01234", body)), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := c.scheme.authorizedBody(sec, c.header, body); got != c.want {
				t.Errorf("got %v, want %v", got, c.want)
			}
		})
	}
}

func upper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'a' && c <= 'f' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}

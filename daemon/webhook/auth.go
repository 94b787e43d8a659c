package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"strings"
)

// authScheme is how a kind's sender proves it holds the secret.
type authScheme int

const (
	// authHubSignature: X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>
	// (GitHub).
	authHubSignature authScheme = iota
	// authGiteaSignature: X-Gitea-Signature or X-Forgejo-Signature: <hex HMAC>,
	// or X-Hub-Signature-256 as for GitHub (Gitea and Forgejo send all of them).
	authGiteaSignature
	// authBearer: Authorization: Bearer <secret> (distribution).
	authBearer
	// authHarbor: Authorization: <secret> verbatim, or Bearer <secret>.
	authHarbor
	// authTokenOrBearer: the path token /webhooks/<kind>/<secret>, or
	// Authorization: Bearer <secret>, for senders that cannot sign.
	authTokenOrBearer
)

// signsBody reports whether the scheme authenticates the body itself, so that
// the body must be read (within the bound) before the sender is known.
func (s authScheme) signsBody() bool {
	return s == authHubSignature || s == authGiteaSignature
}

// takesPathToken reports whether the scheme serves /webhooks/<kind>/<token>.
func (s authScheme) takesPathToken() bool { return s == authTokenOrBearer }

// secret is a kind's shared secret, with its SHA-256 to compare against in
// constant time whatever the length of what a request offers.
type secret struct {
	raw []byte
	sum [sha256.Size]byte
}

func newSecret(b []byte) secret {
	raw := append([]byte(nil), b...)
	return secret{raw: raw, sum: sha256.Sum256(raw)}
}

// equal reports, in constant time, whether given is the secret.
func (s secret) equal(given string) bool {
	g := sha256.Sum256([]byte(given))
	return subtle.ConstantTimeCompare(g[:], s.sum[:]) == 1
}

// signed reports whether hexMAC is the hex HMAC-SHA256 of body under the secret.
func (s secret) signed(body []byte, hexMAC string) bool {
	got, err := hex.DecodeString(hexMAC)
	if err != nil || len(got) != sha256.Size {
		return false
	}
	mac := hmac.New(sha256.New, s.raw)
	mac.Write(body)
	return hmac.Equal(got, mac.Sum(nil))
}

// authorizedByHeaders checks a scheme that does not sign the body: token is the
// path token ("" when the path has none).
func (s authScheme) authorizedByHeaders(sec secret, h http.Header, token string) bool {
	switch s {
	case authBearer:
		return bearerIs(sec, h)
	case authHarbor:
		v := h.Get("Authorization")
		return (v != "" && sec.equal(v)) || bearerIs(sec, h)
	case authTokenOrBearer:
		return (token != "" && sec.equal(token)) || bearerIs(sec, h)
	}
	return false
}

// authorizedBody checks a scheme that signs the body.
func (s authScheme) authorizedBody(sec secret, h http.Header, body []byte) bool {
	if v, ok := strings.CutPrefix(h.Get("X-Hub-Signature-256"), "sha256="); ok && sec.signed(body, v) {
		return true
	}
	if s != authGiteaSignature {
		return false
	}
	for _, name := range []string{"X-Gitea-Signature", "X-Forgejo-Signature"} {
		if v := h.Get(name); v != "" && sec.signed(body, v) {
			return true
		}
	}
	return false
}

// bearerIs reports whether the Authorization header is "Bearer <the secret>"
// (the scheme's name in any case, as RFC 9110 has it).
func bearerIs(sec secret, h http.Header) bool {
	scheme, token, ok := strings.Cut(h.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	token = strings.TrimLeft(token, " ")
	return token != "" && sec.equal(token)
}

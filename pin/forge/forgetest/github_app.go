package forgetest

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ghApp is the GitHub App installation the server knows.
type ghApp struct {
	id, installation int64
	key              *rsa.PublicKey
	ttl              time.Duration
	tokens           map[string]time.Time // installation token -> expiry
	issued           []string
}

// appKey is one RSA key for every server's App (generating one is slow).
var appKey = sync.OnceValue(func() *rsa.PrivateKey {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(fmt.Sprintf("forgetest: generating the App key: %v", err))
	}
	return key
})

// App makes the server know GitHub App appID, installed as installation,
// and returns its private key (PEM, PKCS #1, as GitHub hands it out).
// Installation tokens last an hour (SetAppTokenTTL).
func (g *GitHub) App(appID, installation int64) []byte {
	key := appKey()
	g.smu.Lock()
	defer g.smu.Unlock()
	g.app = &ghApp{id: appID, installation: installation, key: &key.PublicKey, ttl: time.Hour, tokens: map[string]time.Time{}}
	return pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
}

// SetAppTokenTTL sets how long the installation tokens minted next last.
func (g *GitHub) SetAppTokenTTL(d time.Duration) {
	g.smu.Lock()
	defer g.smu.Unlock()
	g.app.ttl = d
}

// AppTokens are the installation tokens minted, oldest first.
func (g *GitHub) AppTokens() []string {
	g.smu.Lock()
	defer g.smu.Unlock()
	if g.app == nil {
		return nil
	}
	return append([]string(nil), g.app.issued...)
}

// mintToken answers POST /app/installations/{id}/access_tokens: a JWT of
// the App (RS256, checked with its public key) gets an installation token.
func (g *GitHub) mintToken(w http.ResponseWriter, r *http.Request) {
	g.smu.Lock()
	defer g.smu.Unlock()
	id, _ := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if g.app == nil || id != g.app.installation {
		failure(g.notFound, 0, nil).write(w)
		return
	}
	jwt, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if err := verifyJWT(g.app, jwt, time.Now()); !ok || err != nil {
		failure(g.badJWT, 0, nil).write(w)
		return
	}
	tok := secret("ghs_")
	exp := time.Now().Add(g.app.ttl).UTC().Truncate(time.Second)
	g.app.tokens[tok] = exp
	g.app.issued = append(g.app.issued, tok)
	m := g.token.object()
	m["token"] = tok
	m["expires_at"] = exp.Format(time.RFC3339)
	writeJSON(w, http.StatusCreated, m)
}

// verifyJWT checks a JWT as GitHub does: RS256 signed by the App's key,
// issued by the App, not before now (a minute of drift), expiring in at
// most 10 minutes.
func verifyJWT(app *ghApp, jwt string, now time.Time) error {
	parts := strings.Split(jwt, ".")
	if len(parts) != 3 {
		return errors.New("not a JWT")
	}
	enc := base64.RawURLEncoding
	var header struct{ Alg string }
	var claims struct {
		Iat, Exp int64
		Iss      json.RawMessage
	}
	h, err1 := enc.DecodeString(parts[0])
	c, err2 := enc.DecodeString(parts[1])
	sig, err3 := enc.DecodeString(parts[2])
	if err := errors.Join(err1, err2, err3, json.Unmarshal(h, &header), json.Unmarshal(c, &claims)); err != nil {
		return err
	}
	if header.Alg != "RS256" {
		return fmt.Errorf("alg %s", header.Alg)
	}
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if err := rsa.VerifyPKCS1v15(app.key, crypto.SHA256, sum[:], sig); err != nil {
		return err
	}
	if iss := strings.Trim(string(claims.Iss), `"`); iss != strconv.FormatInt(app.id, 10) {
		return fmt.Errorf("iss %s", iss)
	}
	if claims.Iat > now.Add(time.Minute).Unix() || claims.Exp <= now.Unix() || claims.Exp > now.Add(10*time.Minute).Unix() {
		return errors.New("iat/exp out of range")
	}
	return nil
}

// graphQL answers POST /graphql for the mutation enablePullRequestAutoMerge.
func (g *GitHub) graphQL(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Query     string         `json:"query"`
		Variables map[string]any `json:"variables"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || !strings.Contains(in.Query, "enablePullRequestAutoMerge") {
		writeJSON(w, http.StatusOK, map[string]any{"errors": []any{map[string]any{"message": "the test server answers enablePullRequestAutoMerge only"}}})
		return
	}
	g.smu.Lock()
	defer g.smu.Unlock()
	var id string
	for _, v := range in.Variables {
		if s, ok := v.(string); ok && strings.HasPrefix(s, "PR_") {
			id = s
		}
	}
	repo, pr := g.byNodeID(id)
	switch {
	case pr == nil:
		writeJSON(w, http.StatusOK, map[string]any{"data": map[string]any{"enablePullRequestAutoMerge": nil},
			"errors": []any{map[string]any{"type": "NOT_FOUND", "path": []string{"enablePullRequestAutoMerge"}, "message": fmt.Sprintf("Could not resolve to a node with the global id of '%s'", id)}}})
	case !repo.autoMergeAllowed:
		writeJSON(w, http.StatusOK, g.autoMergeRefused.object())
	default:
		pr.AutoMerge = true
		m := g.autoMerge.object()
		data := m["data"].(map[string]any)["enablePullRequestAutoMerge"].(map[string]any)
		data["pullRequest"].(map[string]any)["number"] = pr.Number
		writeJSON(w, http.StatusOK, m)
	}
}

// byNodeID finds a pull request by its node ID; g.smu held.
func (g *GitHub) byNodeID(id string) (*ghRepo, *PR) {
	for _, repo := range g.repos {
		for _, pr := range repo.prs {
			if pr.NodeID == id {
				return repo, pr
			}
		}
	}
	return nil, nil
}

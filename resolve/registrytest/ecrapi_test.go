package registrytest_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

// ecrCall sends a DescribeImages request body, SigV4-signed with key and
// secret when key is set (then tamper may change the body after signing), and
// returns the status and the answer.
func ecrCall(t *testing.T, a *registrytest.APIServer, body, key, secret string, tamper func(string) string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, a.URL+"/", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-amz-json-1.1")
	req.Header.Set("X-Amz-Target", "AmazonEC2ContainerRegistry_V20150921.DescribeImages")
	if key != "" {
		sum := sha256.Sum256([]byte(body))
		creds := aws.Credentials{AccessKeyID: key, SecretAccessKey: secret}
		if err := v4.NewSigner().SignHTTP(context.Background(), creds, req, hex.EncodeToString(sum[:]), "ecr", "eu-west-1", time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if tamper != nil {
		b := tamper(body)
		req.Body, req.ContentLength = io.NopCloser(strings.NewReader(b)), int64(len(b))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, out
}

// TestECRAPI_Signature: with WithAPIAuth, only requests signed with those keys
// are answered; without, any signed request is.
func TestECRAPI_Signature(t *testing.T) {
	s := registrytest.New(t)
	metaSeed(t, s, "team/web", 2)
	a := s.ECRAPI(t, registrytest.WithAPIAuth("AKIDTEST", "secret-key"))
	open := s.ECRAPI(t)
	body := `{"registryId":"123456789012","repositoryName":"team/web"}`
	for _, c := range []struct {
		name        string
		a           *registrytest.APIServer
		key, secret string
		tamper      func(string) string
		status      int
		typ         string
	}{
		{name: "signed", a: a, key: "AKIDTEST", secret: "secret-key", status: 200},
		{name: "other key", a: a, key: "AKIDOTHER", secret: "secret-key", status: 403, typ: "UnrecognizedClientException"},
		{name: "wrong secret", a: a, key: "AKIDTEST", secret: "other", status: 403, typ: "InvalidSignatureException"},
		{name: "body changed", a: a, key: "AKIDTEST", secret: "secret-key", status: 403, typ: "InvalidSignatureException",
			tamper: func(b string) string { return strings.Replace(b, "team/web", "team/xyz", 1) }},
		{name: "unsigned", a: a, status: 403, typ: "MissingAuthenticationTokenException"},
		{name: "open, any key", a: open, key: "AKIDANY", secret: "any", status: 200},
		{name: "open, unsigned", a: open, status: 403, typ: "MissingAuthenticationTokenException"},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, out := ecrCall(t, c.a, body, c.key, c.secret, c.tamper)
			if status != c.status || (c.typ != "" && out["__type"] != c.typ) {
				t.Errorf("status %d %v, want %d %s", status, out, c.status, c.typ)
			}
		})
	}
}

// TestECRAPI_Describe: one ImageDetail per manifest, filtered by tagStatus,
// maxResults a page, nextToken; bad parameters are InvalidParameterException,
// an unknown repository RepositoryNotFoundException.
func TestECRAPI_Describe(t *testing.T) {
	s := registrytest.New(t)
	metaSeed(t, s, "team/web", 3)
	sc := &registrytest.Scenario{Repositories: map[string]*registrytest.Repository{"team/web": {Tags: []registrytest.TagSpec{
		{Tag: "multi", Created: "2026-01-01T00:00:00Z", Platforms: []string{"linux/amd64", "linux/arm64"}},
	}}}}
	if err := s.SeedScenario(sc); err != nil {
		t.Fatal(err)
	}
	a := s.ECRAPI(t)
	count := func(body string) (int, string) {
		var n int
		next := ""
		for {
			in := body
			if next != "" {
				in = strings.TrimSuffix(body, "}") + `,"nextToken":"` + next + `"}`
			}
			status, out := ecrCall(t, a, in, "AKIDANY", "any", nil)
			if status != 200 {
				return -1, out["__type"].(string)
			}
			n += len(out["imageDetails"].([]any))
			tok, _ := out["nextToken"].(string)
			if next = tok; next == "" {
				return n, ""
			}
		}
	}
	for _, c := range []struct {
		body string
		n    int
		typ  string
	}{
		{`{"repositoryName":"team/web","filter":{"tagStatus":"TAGGED"}}`, 4, ""},
		{`{"repositoryName":"team/web","filter":{"tagStatus":"UNTAGGED"}}`, 2, ""},
		{`{"repositoryName":"team/web"}`, 6, ""},
		{`{"repositoryName":"team/web","maxResults":2}`, 6, ""},
		{`{"repositoryName":"team/web","maxResults":1001}`, -1, "InvalidParameterException"},
		{`{"repositoryName":"team/web","registryId":"12"}`, -1, "InvalidParameterException"},
		{`{"repositoryName":"team/web","nextToken":"!!"}`, -1, "InvalidParameterException"},
		{`{"repositoryName":"team/nope"}`, -1, "RepositoryNotFoundException"},
	} {
		if n, typ := count(c.body); n != c.n || typ != c.typ {
			t.Errorf("%s: %d images %q, want %d %q", c.body, n, typ, c.n, c.typ)
		}
	}
	// 3 DescribeImages of 2, the others 1 each.
	if got := a.Counts(); got[registrytest.APIPage] != 10 {
		t.Errorf("counts %v", got)
	}
	req, _ := http.NewRequest(http.MethodPost, a.URL+"/", strings.NewReader(`{}`))
	req.Header.Set("X-Amz-Target", "AmazonEC2ContainerRegistry_V20150921.ListImages")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode == 200 {
		t.Errorf("ListImages: %v %v", resp, err)
	}
}

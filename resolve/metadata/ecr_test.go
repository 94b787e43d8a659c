package metadata_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve/metadata"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve/registrytest"
)

// awsEnv makes the AWS SDK's default credential chain find cred's user name
// and password as static keys in the environment (nil: no credentials at
// all), and nothing else: no shared files, no instance metadata, no web
// identity, no endpoint override.
func awsEnv(t *testing.T, cred *authn.AuthConfig) {
	t.Helper()
	none := filepath.Join(t.TempDir(), "none")
	env := map[string]string{
		"AWS_CONFIG_FILE": none, "AWS_SHARED_CREDENTIALS_FILE": none, "AWS_PROFILE": "", "AWS_DEFAULT_PROFILE": "",
		"AWS_EC2_METADATA_DISABLED": "true", "AWS_WEB_IDENTITY_TOKEN_FILE": "", "AWS_ROLE_ARN": "",
		"AWS_CONTAINER_CREDENTIALS_FULL_URI": "", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "",
		"AWS_ENDPOINT_URL": "", "AWS_ENDPOINT_URL_ECR": "", "AWS_REGION": "", "AWS_DEFAULT_REGION": "",
		"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "", "AWS_SESSION_TOKEN": "",
	}
	if cred != nil {
		env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"] = cred.Username, cred.Password
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
}

// TestECR_Records: one record per tag with DescribeImages (SigV4-signed with
// the environment's keys, checked by the server), with the digest and media
// type of the OCI protocol, the digest's push time, and neither platforms nor
// build time (ECR does not list them).
func TestECR_Records(t *testing.T) {
	s := registrytest.New(t)
	seedCloud(t, s, "team/web")
	want := oci(t, s, "team/web")
	first, _ := pushedBounds(t, s, "team/web")
	a := s.ECRAPI(t, registrytest.WithAPIAuth("AKIDREGISTRYTEST", secret))
	s.ResetCounts()
	awsEnv(t, &authn.AuthConfig{Username: "AKIDREGISTRYTEST", Password: secret})
	c := must[*metadata.ECR](t)(metadata.NewECR(metadata.Options{BaseURL: a.URL, Registry: ecrRegistry, PageSize: 3}))
	recs, err := c.ListTagRecords(context.Background(), repoOf(t, s, "team/web"))
	if err != nil {
		t.Fatal(err)
	}
	checkRecords(t, recs, want, time.Millisecond,
		func(string, truth) ([]resolve.Platform, []v1.Hash) { return nil, nil },
		func(w truth) time.Time { return first[w.digest.String()] })
	// 6 tagged digests (latest is 1.1), 3 a page.
	if n := a.Count(registrytest.APIPage); n != 2 {
		t.Errorf("%d DescribeImages, want 2", n)
	}
	if got := a.Counts(); len(got) != 1 {
		t.Errorf("requests %v, want DescribeImages only", got)
	}
	if n := s.Total(); n != 0 {
		t.Errorf("%d registry requests, want 0", n)
	}
}

// TestECR_Request: the request is DescribeImages of the account's registry,
// TAGGED images, maxResults 1000, signed for ecr in the registry's region.
func TestECR_Request(t *testing.T) {
	s := registrytest.New(t)
	seedMany(t, s, "team/web", 2)
	a := s.ECRAPI(t)
	var body []byte
	var hdr http.Header
	rec := recorder{next: http.DefaultTransport, f: func(r *http.Request) {
		body, _ = io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		hdr = r.Header.Clone()
	}}
	awsEnv(t, &authn.AuthConfig{Username: "AKIDREGISTRYTEST", Password: secret})
	c := must[*metadata.ECR](t)(metadata.NewECR(metadata.Options{BaseURL: a.URL, Registry: ecrRegistry, Transport: rec}))
	if recs, err := c.ListTagRecords(context.Background(), repoOf(t, s, "team/web")); err != nil || len(recs) != 2 {
		t.Fatalf("%d tags, %v", len(recs), err)
	}
	var in map[string]any
	if err := json.Unmarshal(body, &in); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(in) != fmt.Sprint(map[string]any{"filter": map[string]any{"tagStatus": "TAGGED"}, "maxResults": 1000.0,
		"registryId": "123456789012", "repositoryName": "team/web"}) {
		t.Errorf("request %s", body)
	}
	if got := hdr.Get("X-Amz-Target"); got != "AmazonEC2ContainerRegistry_V20150921.DescribeImages" {
		t.Errorf("X-Amz-Target %q", got)
	}
	if got := hdr.Get("Authorization"); !strings.Contains(got, "/eu-west-1/ecr/aws4_request") || strings.Contains(got, secret) {
		t.Errorf("Authorization %q", got)
	}
}

// recorder shows each request to f before sending it.
type recorder struct {
	next http.RoundTripper
	f    func(*http.Request)
}

func (r recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	r.f(req)
	return r.next.RoundTrip(req)
}

// TestECR_Archived: the tags of an archived image (which cannot be pulled) are
// left out.
func TestECR_Archived(t *testing.T) {
	s := registrytest.New(t)
	seedMany(t, s, "team/web", 1)
	a := s.ECRAPI(t)
	a.Inject(registrytest.APIFault{Kind: registrytest.APIPage, Body: []byte(`{"imageDetails":[` +
		`{"imageDigest":"` + digestA + `","imageTags":["old"],"imageStatus":"ARCHIVED","imagePushedAt":1700000000},` +
		`{"imageDigest":"` + digestA + `","imageTags":["new"],"imageStatus":"ACTIVE","imagePushedAt":1700000000.5}]}`)})
	awsEnv(t, &authn.AuthConfig{Username: "AKIDREGISTRYTEST", Password: secret})
	c := must[*metadata.ECR](t)(metadata.NewECR(metadata.Options{BaseURL: a.URL, Registry: ecrRegistry}))
	recs, err := c.ListTagRecords(context.Background(), repoOf(t, s, "team/web"))
	if err != nil || len(recs) != 1 || recs[0].Tag != "new" {
		t.Fatalf("%v, %v; want only new", recs, err)
	}
	if want := time.Unix(1700000000, 5e8).UTC(); !recs[0].Pushed.Equal(want) {
		t.Errorf("pushed %s, want %s", recs[0].Pushed, want)
	}
}

// TestECR_Registry: the registry must be an ECR host; FIPS hosts are ECR
// hosts.
func TestECR_Registry(t *testing.T) {
	awsEnv(t, nil)
	for _, c := range []struct {
		registry string
		ok       bool
	}{
		{ecrRegistry, true},
		{"123456789012.dkr.ecr-fips.us-east-1.amazonaws.com", true},
		{"registry.example", false},
		{"", false},
	} {
		e, err := metadata.NewECR(metadata.Options{Registry: c.registry})
		if (err == nil) != c.ok {
			t.Errorf("%q: %v", c.registry, err)
		}
		if err == nil && e.Name() != resolve.MetadataECR {
			t.Errorf("name %q", e.Name())
		}
	}
}

// TestECRShape: the test server answers as the ECR API reference describes
// DescribeImages (JSON 1.1).
func TestECRShape(t *testing.T) {
	s := registrytest.New(t)
	seedCloud(t, s, "team/web")
	a := s.ECRAPI(t)
	post := func(in string, wantStatus int) []byte {
		req, err := http.NewRequest(http.MethodPost, a.URL+"/", strings.NewReader(in))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/x-amz-json-1.1")
		req.Header.Set("X-Amz-Target", "AmazonEC2ContainerRegistry_V20150921.DescribeImages")
		req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=AKIDREGISTRYTEST/20260101/eu-west-1/ecr/aws4_request, "+
			"SignedHeaders=content-type;host;x-amz-date;x-amz-target, Signature="+strings.Repeat("0", 64))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != wantStatus {
			t.Fatalf("status %d, want %d: %s", resp.StatusCode, wantStatus, body)
		}
		return body
	}
	sample := mustRead(t, "testdata/ecr/DescribeImages.json")
	compareShape(t, "testdata/ecr/DescribeImages.json", sample,
		post(`{"registryId":"123456789012","repositoryName":"team/web","maxResults":4,"filter":{"tagStatus":"TAGGED"}}`, 200))
	compareShape(t, "testdata/ecr/DescribeImages.json", sample,
		post(`{"registryId":"123456789012","repositoryName":"team/web","maxResults":10}`, 200))
	compareShape(t, "testdata/ecr/error.json", mustRead(t, "testdata/ecr/error.json"),
		post(`{"registryId":"123456789012","repositoryName":"team/nope"}`, http.StatusBadRequest))
}

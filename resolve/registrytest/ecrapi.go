package registrytest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// Amazon ECR's DescribeImages (Amazon ECR API Reference) as the AWS SDK calls
// it: the JSON 1.1 protocol, POST / with X-Amz-Target:
// AmazonEC2ContainerRegistry_V20150921.DescribeImages and Content-Type:
// application/x-amz-json-1.1, counted as APIPage with the request's
// repositoryName as Repo. The request {"registryId", "repositoryName",
// "maxResults", "nextToken", "filter": {"tagStatus"}} answers
// {"imageDetails": [...], "nextToken"}: one ImageDetail per manifest of the
// repository (an index's children untagged), sorted by digest, filtered by
// tagStatus (TAGGED, UNTAGGED, else ANY); maxResults 1 to 1000 (default 100);
// nextToken opaque, absent on the last page. An ImageDetail has registryId,
// repositoryName, imageDigest, imageTags (absent when none), imageSizeInBytes,
// imagePushedAt (the first push of its tags, epoch seconds with milliseconds),
// imageManifestMediaType, imageStatus ACTIVE and, for an image,
// artifactMediaType (its config's media type). Other operations are 400
// UnknownOperationException, an unknown repository 400
// RepositoryNotFoundException; errors are {"__type", "message"}.
//
// Every request must be signed (Authorization: AWS4-HMAC-SHA256 ..., for the
// service ecr): else 403 MissingAuthenticationTokenException. With
// WithAPIAuth(accessKeyID, secretAccessKey) the signature is verified (SigV4,
// recomputed with those static credentials): another key is 403
// UnrecognizedClientException, a wrong signature 403 InvalidSignatureException.
// APIFault.NextLoop makes nextToken the page's own; NextURL does not apply.

// ECRAPI starts ECR's API answering from s, closed when the test ends.
func (s *Server) ECRAPI(t testing.TB, opts ...APIOption) *APIServer {
	t.Helper()
	opts = append([]APIOption{WithAPIMaxPageSize(1000)}, opts...)
	return newAPIServer(t, s, apiVendor{name: "ecr", defaultLimit: 100, route: ecrRoute, serve: serveECR,
		errorBody: func(status int, msg string) any { return ecrErrorBody(ecrErrorType(status), msg) }}, opts)
}

const ecrTarget = "AmazonEC2ContainerRegistry_V20150921.DescribeImages"

// ecrErrorType is the exception a fault of status answers with.
func ecrErrorType(status int) string {
	switch {
	case status == http.StatusNotFound:
		return "RepositoryNotFoundException"
	case status == http.StatusTooManyRequests:
		return "ThrottlingException"
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return "AccessDeniedException"
	case status >= 500:
		return "ServerException"
	}
	return "InvalidParameterException"
}

func ecrErrorBody(typ, msg string) any { return map[string]string{"__type": typ, "message": msg} }

// ecrFail answers an ECR error.
func ecrFail(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("X-Amzn-ErrorType", typ)
	writeJSON(w, status, ecrErrorBody(typ, msg))
}

type ecrRequest struct {
	RegistryID     string `json:"registryId"`
	RepositoryName string `json:"repositoryName"`
	MaxResults     *int   `json:"maxResults"`
	NextToken      string `json:"nextToken"`
	Filter         *struct {
		TagStatus string `json:"tagStatus"`
	} `json:"filter"`
}

// ecrRoute classifies an ECR request; the body is read (at most 1 MiB) and
// put back.
func ecrRoute(r *http.Request) (APIKind, string) {
	if r.Method != http.MethodPost || r.URL.Path != "/" || r.Header.Get("X-Amz-Target") != ecrTarget {
		return APIOther, ""
	}
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	r.Body = io.NopCloser(bytes.NewReader(body))
	var in ecrRequest
	_ = json.Unmarshal(body, &in)
	return APIPage, in.RepositoryName
}

func serveECR(a *APIServer, w http.ResponseWriter, r *http.Request, repo string, f *APIFault) {
	body, _ := io.ReadAll(r.Body)
	if typ, err := ecrVerify(a, r, body); err != nil {
		ecrFail(w, http.StatusForbidden, typ, err.Error())
		return
	}
	in, err := ecrParse(r, body)
	if err != nil {
		ecrFail(w, http.StatusBadRequest, "InvalidParameterException", err.Error())
		return
	}
	tags, err := a.Registry.Describe(repo)
	if err != nil {
		ecrFail(w, http.StatusBadRequest, "RepositoryNotFoundException", fmt.Sprintf(
			"The repository with name '%s' does not exist in the registry with id '%s'", repo, in.RegistryID))
		return
	}
	details, err := ecrDetails(a.Registry, in, tags)
	if err != nil {
		ecrFail(w, http.StatusInternalServerError, "ServerException", err.Error())
		return
	}
	start, ok := cloudOffset(in.NextToken)
	if !ok {
		ecrFail(w, http.StatusBadRequest, "InvalidParameterException", "Invalid parameter at 'nextToken' failed to satisfy constraint: 'Invalid NextToken'")
		return
	}
	size := a.cfg.maxPageSize
	if in.MaxResults != nil {
		size = min(*in.MaxResults, size)
	} else {
		size = min(a.v.defaultLimit, size)
	}
	end := min(start+size, len(details))
	out := map[string]any{"imageDetails": details[min(start, end):end]}
	if end < len(details) {
		out["nextToken"] = cloudToken(end)
	}
	if f != nil && f.NextLoop {
		out["nextToken"] = cloudToken(start)
	}
	b, _ := json.Marshal(out)
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	w.Header().Set("X-Amzn-RequestId", "registrytest")
	_, _ = w.Write(b)
}

// ecrParse reads and checks a DescribeImages request.
func ecrParse(r *http.Request, body []byte) (ecrRequest, error) {
	var in ecrRequest
	if ct := r.Header.Get("Content-Type"); ct != "application/x-amz-json-1.1" {
		return in, fmt.Errorf("unsupported Content-Type %q", ct)
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return in, errors.New("the request body is not valid JSON")
	}
	if in.RepositoryName == "" {
		return in, errors.New("1 validation error detected: Value null at 'repositoryName' failed to satisfy constraint: Member must not be null")
	}
	if in.RegistryID != "" && !regexp.MustCompile(`^[0-9]{12}$`).MatchString(in.RegistryID) {
		return in, fmt.Errorf("Invalid parameter at 'registryId' failed to satisfy constraint: 'must satisfy regular expression '[0-9]{12}''")
	}
	if in.MaxResults != nil && (*in.MaxResults < 1 || *in.MaxResults > 1000) {
		return in, fmt.Errorf("1 validation error detected: Value '%d' at 'maxResults' failed to satisfy constraint: Member must have value less than or equal to 1000", *in.MaxResults)
	}
	return in, nil
}

// ecrDetails lists the ImageDetails of a repository's manifests, filtered by
// tagStatus.
func ecrDetails(s *Server, in ecrRequest, tags []TagDescription) ([]map[string]any, error) {
	status := "ANY"
	if in.Filter != nil && in.Filter.TagStatus != "" {
		status = in.Filter.TagStatus
	}
	var out []map[string]any
	for _, ci := range cloudImages(tags) {
		if (status == "TAGGED" && len(ci.Tags) == 0) || (status == "UNTAGGED" && len(ci.Tags) > 0) {
			continue
		}
		d := map[string]any{"registryId": in.RegistryID, "repositoryName": in.RepositoryName, "imageDigest": ci.Digest,
			"imageSizeInBytes": ci.Size, "imagePushedAt": float64(ci.FirstPushed.UnixMilli()) / 1000,
			"imageManifestMediaType": ci.MediaType, "imageStatus": "ACTIVE"}
		if len(ci.Tags) > 0 {
			d["imageTags"] = ci.Tags
		}
		if !ci.Index {
			cmt, err := configMediaType(s, in.RepositoryName, ci.Digest)
			if err != nil {
				return nil, err
			}
			d["artifactMediaType"] = cmt
		}
		out = append(out, d)
	}
	return out, nil
}

// ecrAuthorization reads AWS4-HMAC-SHA256 Credential=AKID/date/region/ecr/aws4_request, SignedHeaders=..., Signature=...
var ecrAuthorization = regexp.MustCompile(`^AWS4-HMAC-SHA256 Credential=([^/,]+)/(\d{8})/([^/,]+)/ecr/aws4_request, ?SignedHeaders=([a-z0-9;-]+), ?Signature=[0-9a-f]{64}$`)

// ecrVerify checks r's SigV4 signature: present always, and with WithAPIAuth
// recomputed with the static credentials. It returns the exception to answer.
func ecrVerify(a *APIServer, r *http.Request, body []byte) (string, error) {
	m := ecrAuthorization.FindStringSubmatch(r.Header.Get("Authorization"))
	if m == nil {
		return "MissingAuthenticationTokenException", errors.New("Missing Authentication Token")
	}
	if !a.cfg.auth {
		return "", nil
	}
	if m[1] != a.cfg.user {
		return "UnrecognizedClientException", errors.New("The security token included in the request is invalid.")
	}
	at, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil || at.Format("20060102") != m[2] {
		return "InvalidSignatureException", errors.New("X-Amz-Date is missing or does not match the credential scope")
	}
	req, err := http.NewRequest(r.Method, "http://"+r.Host+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return "InvalidSignatureException", err
	}
	req.Host = r.Host
	for _, h := range strings.Split(m[4], ";") {
		switch h {
		case "host":
		case "content-length":
			req.ContentLength = r.ContentLength
		default:
			req.Header[http.CanonicalHeaderKey(h)] = r.Header.Values(h)
		}
	}
	sum := sha256.Sum256(body)
	creds := aws.Credentials{AccessKeyID: a.cfg.user, SecretAccessKey: a.cfg.pass, SessionToken: r.Header.Get("X-Amz-Security-Token")}
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, req, hex.EncodeToString(sum[:]), "ecr", m[3], at); err != nil {
		return "InvalidSignatureException", err
	}
	if req.Header.Get("Authorization") != r.Header.Get("Authorization") {
		return "InvalidSignatureException", errors.New("The request signature we calculated does not match the signature you provided.")
	}
	return "", nil
}

package metadata

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/ecr"
	ecrtypes "github.com/aws/aws-sdk-go-v2/service/ecr/types"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// Amazon ECR's DescribeImages (Amazon ECR API Reference, DescribeImages and
// ImageDetail), through the AWS SDK: the JSON 1.1 protocol, POST / with
// X-Amz-Target: AmazonEC2ContainerRegistry_V20150921.DescribeImages, signed
// with SigV4. The request names registryId (the account) and repositoryName,
// maxResults (at most 1000), nextToken and filter tagStatus TAGGED; the answer
// is {"imageDetails": [ImageDetail], "nextToken"}, one ImageDetail per digest:
// imageDigest, imageTags[], imagePushedAt, imageManifestMediaType,
// artifactMediaType, imageStatus, .... One record per tag; Pushed is
// imagePushedAt (when the digest was pushed, never before its build). An image
// whose imageStatus is ARCHIVED or ACTIVATING cannot be pulled: its tags are
// left out. ECR does not list an image's platforms nor its build time:
// Platforms and Created stay nil and zero (the resolver reads the few candidates
// that need them through the OCI protocol).
//
// The registry host {account}.dkr.ecr.{region}.amazonaws.com gives the account
// and the region; Options.BaseURL, when set, is the endpoint (BaseEndpoint).
// Credentials: the AWS SDK's default chain (environment, shared configuration,
// web identity (IRSA), EKS pod identity, instance role), as the ecr credentials
// source uses it; they are never logged nor put in an error. The SDK does not
// retry: Options.Transport does.

// ecrMaxPageSize is the largest maxResults DescribeImages accepts.
const ecrMaxPageSize = 1000

// ECR reads Amazon ECR's DescribeImages. It is safe for concurrent use.
type ECR struct {
	c        apiClient
	client   *ecr.Client
	account  string
	endpoint string // the endpoint named in errors (BaseURL, else the regional one)
}

// NewECR returns an ECR client for the registry o.Registry
// ({account}.dkr.ecr.{region}.amazonaws.com), loading the AWS SDK's default
// configuration for its region.
func NewECR(o Options) (*ECR, error) {
	account, region, ok := resolve.ECRHost(o.Registry)
	if !ok {
		return nil, fmt.Errorf("%s API: registry %q is not an ECR registry host ({account}.dkr.ecr.{region}.amazonaws.com)",
			resolve.MetadataECR, o.Registry)
	}
	domain := "amazonaws.com"
	if strings.HasSuffix(o.Registry, ".amazonaws.com.cn") {
		domain = "amazonaws.com.cn"
	}
	e := &ECR{c: newAPIClient(resolve.MetadataECR, o, ecrMaxPageSize), account: account,
		endpoint: "https://api.ecr." + region + "." + domain + "/"}
	if o.BaseURL != "" {
		base, err := baseURL(resolve.MetadataECR, o.BaseURL, "")
		if err != nil {
			return nil, err
		}
		e.endpoint = base + "/"
	}
	cfg, err := awsconfig.LoadDefaultConfig(context.Background(), awsconfig.WithRegion(region))
	if err != nil {
		return nil, fmt.Errorf("%s API: AWS configuration: %w", resolve.MetadataECR, err)
	}
	e.client = ecr.NewFromConfig(cfg, func(eo *ecr.Options) {
		eo.HTTPClient = e.c.hc
		eo.Retryer = aws.NopRetryer{}
		if o.BaseURL != "" {
			eo.BaseEndpoint = aws.String(strings.TrimSuffix(e.endpoint, "/"))
		}
		if strings.Contains(o.Registry, "-fips.") {
			eo.EndpointOptions.UseFIPSEndpoint = aws.FIPSEndpointStateEnabled
		}
	})
	return e, nil
}

// Name is resolve.MetadataECR.
func (e *ECR) Name() string { return resolve.MetadataECR }

// ListTagRecords lists every tag of repo with DescribeImages.
func (e *ECR) ListTagRecords(ctx context.Context, repo name.Repository) ([]resolve.TagRecord, error) {
	if err := e.credentials(ctx); err != nil {
		return nil, err
	}
	// The pager does the bookkeeping of the listing: each page is named by the
	// endpoint and its nextToken (a repeated token is a loop), and counted.
	p, err := e.c.newPager(repo.String(), e.endpoint)
	if err != nil {
		return nil, err
	}
	in := &ecr.DescribeImagesInput{
		RegistryId:     aws.String(e.account),
		RepositoryName: aws.String(repo.RepositoryStr()),
		MaxResults:     aws.Int32(int32(e.c.pageSize)),
		Filter:         &ecrtypes.DescribeImagesFilter{TagStatus: ecrtypes.TagStatusTagged},
	}
	var out []resolve.TagRecord
	for cur, next := "", e.endpoint; next != ""; {
		u, err := p.page(cur, next)
		if err != nil {
			return nil, err
		}
		page, err := e.describe(ctx, p, in)
		if err != nil {
			return nil, err
		}
		for _, d := range page.ImageDetails {
			recs, err := e.records(p, d)
			if err != nil {
				return nil, err
			}
			out = append(out, recs...)
		}
		cur, next = u, ""
		if tok := aws.ToString(page.NextToken); tok != "" {
			in.NextToken = page.NextToken
			next = e.endpoint + "?nextToken=" + url.QueryEscape(tok)
		}
	}
	return out, nil
}

// credentials retrieves the AWS credentials (cached by the SDK until they
// expire) and registers their secrets with resolve.DefaultRedactor, so that an
// answer quoting them is redacted.
func (e *ECR) credentials(ctx context.Context) error {
	provider := e.client.Options().Credentials
	if provider == nil {
		return fmt.Errorf("%s API: no AWS credentials provider", e.Name())
	}
	creds, err := provider.Retrieve(ctx)
	if err != nil {
		return fmt.Errorf("%s API: AWS credentials: %w", e.Name(), err)
	}
	resolve.DefaultRedactor.Add(creds.SecretAccessKey, creds.SessionToken)
	return nil
}

// describe calls DescribeImages once, its answer bounded by MaxPageBytes.
func (e *ECR) describe(ctx context.Context, p *pager, in *ecr.DescribeImagesInput) (*ecr.DescribeImagesOutput, error) {
	call := &ecrCall{hc: e.c.hc, max: e.c.maxPageBytes, url: e.endpoint}
	out, err := e.client.DescribeImages(ctx, in, func(o *ecr.Options) { o.HTTPClient = call })
	if err == nil {
		return out, nil
	}
	if call.over {
		return nil, p.limit("bytes per page", e.c.maxPageBytes, call.url)
	}
	return nil, e.apiError(call.url, err)
}

// apiError turns an SDK error into an *APIError: the status, the service's
// error code and message, never the request's signature.
func (e *ECR) apiError(u string, err error) *APIError {
	ae := &APIError{API: e.Name(), Method: http.MethodPost, URL: RedactURL(u)}
	var re *awshttp.ResponseError
	if errors.As(err, &re) && re.Response != nil {
		ae.Status = re.HTTPStatusCode()
		ae.RetryAfter = retryAfter(re.Response.Header.Get("Retry-After"))
	}
	var coded interface {
		ErrorCode() string
		ErrorMessage() string
	}
	if errors.As(err, &coded) && coded.ErrorCode() != "" {
		ae.Err = fmt.Errorf("DescribeImages: %s", coded.ErrorCode())
		ae.Body = resolve.DefaultRedactor.Clean(coded.ErrorMessage(), maxErrorExcerpt)
		return ae
	}
	if ae.Status == http.StatusOK {
		ae.Err = fmt.Errorf("DescribeImages: malformed answer: %w", err)
		return ae
	}
	ae.Err = fmt.Errorf("DescribeImages: %w", err)
	return ae
}

// records are the records of one ImageDetail, one per tag.
func (e *ECR) records(p *pager, d ecrtypes.ImageDetail) ([]resolve.TagRecord, error) {
	if len(d.ImageTags) == 0 || (d.ImageStatus != "" && d.ImageStatus != ecrtypes.ImageStatusActive) {
		return nil, nil
	}
	u := e.endpoint
	base := resolve.TagRecord{MediaType: types.MediaType(aws.ToString(d.ImageManifestMediaType))}
	var err error
	if base.Digest, err = e.c.digestOf(u, aws.ToString(d.ImageDigest)); err != nil {
		return nil, posted(err)
	}
	if d.ImagePushedAt != nil {
		base.Pushed = d.ImagePushedAt.UTC()
	}
	out := make([]resolve.TagRecord, 0, len(d.ImageTags))
	for _, tag := range d.ImageTags {
		if err := e.c.checkTag(u, tag); err != nil {
			return nil, posted(err)
		}
		if err := p.tag(u, tag); err != nil {
			return nil, err
		}
		rec := base
		rec.Tag = tag
		out = append(out, rec)
	}
	return out, nil
}

// posted makes a malformed-answer *APIError say POST, DescribeImages' method.
func posted(err error) error {
	var ae *APIError
	if errors.As(err, &ae) {
		ae.Method = http.MethodPost
	}
	return err
}

// ecrCall carries one DescribeImages request: it notes the URL the SDK sent it
// to and bounds the answer's body.
type ecrCall struct {
	hc   *http.Client
	max  int64
	url  string
	over bool
}

// maxECRRequestBytes bounds a DescribeImages request's body: a few hundred
// bytes of JSON, a nextToken included.
const maxECRRequestBytes = 64 << 10

// Do implements the SDK's HTTPClient.
func (c *ecrCall) Do(req *http.Request) (*http.Response, error) {
	u := *req.URL
	u.RawQuery = ""
	c.url = u.String()
	if err := ownBody(req); err != nil {
		return nil, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	resp.Body = &cappedBody{r: resp.Body, left: c.max, over: &c.over}
	return resp, nil
}

// ownBody gives req a body of its own, read from the SDK's into memory. The SDK
// closes its body when Do returns, and a closed one answers io.EOF as an error
// from WriteTo; net/http may still be reading it then (its check that the body
// holds no more than Content-Length comes after the server has the request and
// may have answered), and it closes the connection under the answer being read.
func ownBody(req *http.Request) error {
	if req.Body == nil || req.Body == http.NoBody {
		return nil
	}
	b, err := io.ReadAll(io.LimitReader(req.Body, maxECRRequestBytes+1))
	_ = req.Body.Close()
	if err != nil {
		return fmt.Errorf("read the request body: %w", err)
	}
	if len(b) > maxECRRequestBytes {
		return fmt.Errorf("request body over %d bytes", maxECRRequestBytes)
	}
	req.Body = io.NopCloser(bytes.NewReader(b))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	req.ContentLength = int64(len(b))
	return nil
}

// errPageOver is what a body over its cap reads as.
var errPageOver = errors.New("answer over the page size cap")

// cappedBody reads at most left bytes; more sets *over and fails the read.
type cappedBody struct {
	r    io.ReadCloser
	left int64
	over *bool
}

func (b *cappedBody) Read(p []byte) (int, error) {
	if *b.over {
		return 0, io.EOF // the SDK discards the rest: there is nothing to read
	}
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.r.Read(p)
	if int64(n) > b.left {
		*b.over = true
		return 0, errPageOver
	}
	b.left -= int64(n)
	return n, err
}

func (b *cappedBody) Close() error { return b.r.Close() }

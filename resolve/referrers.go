package resolve

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// DefaultMaxSignatureBytes caps the bytes read of one referrers list (setting
// trust.maxSignatureBytes).
const DefaultMaxSignatureBytes int64 = 1 << 20

var _ ReferrersLister = (*Remote)(nil)

// WithSignatureLimits caps the bytes read of one referrers list (GET
// /v2/<repo>/referrers/<digest>), counted after decompression: a list over it
// fails with a *ReferrersLimitError after reading at most maxBytes+1 bytes. A
// value <= 0 keeps the default (DefaultMaxSignatureBytes).
func WithSignatureLimits(maxBytes int64) RemoteOption {
	return func(o *remoteOptions) {
		if maxBytes > 0 {
			o.maxReferrersBytes = maxBytes
		}
	}
}

// ReferrersLimitError is a referrers list the client stopped reading: over the
// byte cap of WithSignatureLimits.
type ReferrersLimitError struct {
	Image string // repository@digest as written
	Max   int64
}

func (e *ReferrersLimitError) Error() string {
	return fmt.Sprintf("%s: the referrers list is over the cap of %d bytes (setting trust.maxSignatureBytes)", e.Image, e.Max)
}

// referrersBytesError is a referrers body over the cap; Referrers turns it into
// a *ReferrersLimitError naming the image.
type referrersBytesError struct{ max int64 }

func (e *referrersBytesError) Error() string {
	return fmt.Sprintf("referrers list over %d bytes", e.max)
}

func isReferrers(req *http.Request) bool {
	return req.Method == http.MethodGet && strings.Contains(req.URL.Path, "/referrers/")
}

// Referrers lists the manifests referring to digest (the OCI 1.1 referrers API)
// through the Remote's machinery: its credentials, retries, timeouts and the byte
// cap of WithSignatureLimits. It returns the registry's image index, or an error
// wrapping ErrReferrersUnsupported when the registry has no referrers API (404,
// 400, 406, or an answer that is not an image index); the caller then falls back
// to the referrers tag schema. It never reads the fallback tag itself.
func (r *Remote) Referrers(ctx context.Context, repo name.Repository, digest v1.Hash) (*Manifest, error) {
	t := r.endpoint(repo)
	written := repo.Digest(digest.String()).String()
	var raw []byte
	err := r.call(ctx, repo, t, t.pageSize, func(ctx context.Context, p *remote.Puller) error {
		idx, err := remote.Referrers(t.repo.Digest(digest.String()), remote.Reuse(p), remote.WithContext(ctx))
		if err != nil {
			return err
		}
		raw, err = idx.RawManifest()
		return err
	})
	var over *referrersBytesError
	switch {
	case errors.As(err, &over):
		return nil, &ReferrersLimitError{Image: written, Max: over.max}
	case err != nil && strings.Contains(err.Error(), "does not support the Referrers API"):
		// go-containerregistry's answer, with the tag fallback off, to a 404, 400,
		// 406 or a body that is not an image index.
		return nil, fmt.Errorf("%s: %w", written, ErrReferrersUnsupported)
	case err != nil:
		return nil, t.registryError("list referrers", repo, written, err)
	}
	var idx struct {
		MediaType types.MediaType `json:"mediaType"`
		Manifests []v1.Descriptor `json:"manifests"`
	}
	if err := json.Unmarshal(raw, &idx); err != nil || idx.MediaType != types.OCIImageIndex || idx.Manifests == nil {
		return nil, fmt.Errorf("%s: the referrers answer is not an image index: %w", written, ErrReferrersUnsupported)
	}
	h := sha256.Sum256(raw)
	return &Manifest{Digest: v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%x", h)}, MediaType: types.OCIImageIndex, Raw: raw}, nil
}

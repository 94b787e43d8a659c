package signature

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// Sources of a signature (resolve.Verified.Source).
const (
	SourceReferrers    = "referrers"
	SourceReferrersTag = "referrers-tag"
	SourceCosignTag    = "cosign-tag"
)

const (
	bundleTypePrefix    = "application/vnd.dev.sigstore.bundle"
	simpleSigningType   = "application/vnd.dev.cosign.simplesigning.v1+json"
	predicateCosignSign = "https://sigstore.dev/cosign/sign/v1"
	annPredicateType    = "dev.sigstore.bundle.predicateType"
)

// find looks for a signature of s satisfying c, source after source.
func (v *Verifier) find(ctx context.Context, s resolve.Subject, c *check) (*resolve.Verified, error) {
	rs := &reasons{}
	idx, source, err := v.referrers(ctx, s, rs)
	if err != nil {
		return nil, err
	}
	if idx != nil {
		ver, err := v.checkIndex(ctx, s, c, idx, source, rs)
		if ver != nil || err != nil {
			return ver, err
		}
	}
	ver, err := v.checkCosignTag(ctx, s, c, rs)
	if ver != nil || err != nil {
		return ver, err
	}
	return nil, &resolve.UnverifiedError{Reason: rs.String()}
}

// referrers returns the list of s's referrers: by the referrers API, or by the
// referrers tag schema when the registry has none; nil when there is none.
func (v *Verifier) referrers(ctx context.Context, s resolve.Subject, rs *reasons) (*resolve.Manifest, string, error) {
	host := s.Repo.RegistryStr()
	if rl, ok := v.reg.(resolve.ReferrersLister); ok && !v.knownNoReferrers(host) {
		m, err := rl.Referrers(ctx, s.Repo, s.Digest)
		var limit *resolve.ReferrersLimitError
		switch {
		case err == nil:
			return m, SourceReferrers, nil
		case errors.As(err, &limit):
			rs.add(prioCap, fmt.Sprintf("the referrers list is over the cap of %d bytes (trust.maxSignatureBytes)", limit.Max))
			return nil, "", nil
		case !errors.Is(err, resolve.ErrReferrersUnsupported):
			return nil, "", fmt.Errorf("list the referrers of %s: %w", s.Digest, err)
		}
		v.noReferrers.Store(host, v.o.now().Add(noReferrersTTL))
		v.o.log.Debug("registry has no referrers API; reading the referrers tag schema", "registry", host)
	}
	m, err := v.fallbackTag(ctx, s, s.Digest.Algorithm+"-"+s.Digest.Hex)
	if m == nil || err != nil {
		return nil, "", err
	}
	if !m.IsIndex() {
		rs.add(prioMalformed, "the referrers tag "+s.Digest.Algorithm+"-"+s.Digest.Hex+" is not an image index")
		return nil, "", nil
	}
	return m, SourceReferrersTag, nil
}

func (v *Verifier) knownNoReferrers(host string) bool {
	until, ok := v.noReferrers.Load(host)
	return ok && v.o.now().Before(until.(timeT))
}

// fallbackTag reads the manifest at tag; nil when it does not exist (not listed,
// or 404).
func (v *Verifier) fallbackTag(ctx context.Context, s resolve.Subject, tag string) (*resolve.Manifest, error) {
	if s.Tags != nil && !s.Tags[tag] {
		return nil, nil
	}
	m, err := v.reg.Manifest(ctx, s.Repo, tag)
	if isNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the signature tag %s: %w", tag, err)
	}
	return m, nil
}

// checkIndex verifies the bundles a referrers list names, until one satisfies c.
func (v *Verifier) checkIndex(ctx context.Context, s resolve.Subject, c *check, idx *resolve.Manifest, source string, rs *reasons) (*resolve.Verified, error) {
	var im v1.IndexManifest
	if err := json.Unmarshal(idx.Raw, &im); err != nil {
		rs.add(prioMalformed, "malformed referrers list: "+short(err))
		return nil, nil
	}
	var entries []v1.Descriptor
	seen := map[v1.Hash]bool{}
	for _, d := range im.Manifests {
		if !strings.HasPrefix(d.ArtifactType, bundleTypePrefix) || seen[d.Digest] {
			continue
		}
		seen[d.Digest] = true
		if pt := d.Annotations[annPredicateType]; pt != "" && pt != predicateCosignSign {
			rs.add(prioAttestation, "only attestations (predicate "+pt+"), no signature")
			continue
		}
		if d.Digest == s.Digest || d.Digest == idx.Digest {
			rs.add(prioMalformed, "the referrers list names the image itself as a signature")
			continue
		}
		entries = append(entries, d)
	}
	if len(entries) > v.o.limits.MaxReferrers {
		rs.add(prioCap, fmt.Sprintf("over the cap of %d referrers (trust.maxReferrers): %d signatures listed", v.o.limits.MaxReferrers, len(entries)))
		return nil, nil
	}
	for _, d := range entries {
		ver, err := v.checkReferrer(ctx, s, c, d, rs)
		if ver != nil || err != nil {
			if ver != nil {
				ver.Source = source
			}
			return ver, err
		}
	}
	return nil, nil
}

// checkReferrer reads one bundle manifest and its bundle, and verifies it.
func (v *Verifier) checkReferrer(ctx context.Context, s resolve.Subject, c *check, d v1.Descriptor, rs *reasons) (*resolve.Verified, error) {
	raw, ok, err := v.readManifest(ctx, s, d, rs)
	if !ok || err != nil {
		return nil, err
	}
	var m v1.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		rs.add(prioMalformed, "malformed signature manifest: "+short(err))
		return nil, nil
	}
	if m.Subject != nil && m.Subject.Digest != s.Digest {
		rs.add(prioOther, "bundle is for another image ("+m.Subject.Digest.String()+")")
		return nil, nil
	}
	for _, l := range m.Layers {
		if !strings.HasPrefix(string(l.MediaType), bundleTypePrefix) {
			continue
		}
		b, ok, err := v.readBlob(ctx, s, l, rs)
		if !ok || err != nil {
			return nil, err
		}
		ver, prio, reason := v.verifyBundle(b, s, c)
		if ver != nil {
			return ver, nil
		}
		rs.add(prio, reason)
		return nil, nil
	}
	rs.add(prioMalformed, "a signature manifest has no bundle layer")
	return nil, nil
}

// readManifest reads the manifest d names, within the byte cap and confirmed by
// its digest; ok false (and the reason added) when it is skipped.
func (v *Verifier) readManifest(ctx context.Context, s resolve.Subject, d v1.Descriptor, rs *reasons) ([]byte, bool, error) {
	if d.Size > v.o.limits.MaxBytes {
		rs.add(prioCap, fmt.Sprintf("a signature manifest is over the cap of %d bytes (trust.maxSignatureBytes)", v.o.limits.MaxBytes))
		return nil, false, nil
	}
	m, err := v.reg.Manifest(ctx, s.Repo, d.Digest.String())
	switch {
	case err != nil && strings.Contains(err.Error(), "does not match requested digest"):
		rs.add(prioOther, "the registry served a signature manifest whose bytes do not hash to its digest")
		return nil, false, nil
	case isNotFound(err):
		rs.add(prioMalformed, "a listed signature manifest is missing ("+d.Digest.String()+")")
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("read the signature manifest %s: %w", d.Digest, err)
	}
	return v.confirm(m.Raw, d.Digest, "signature manifest", rs)
}

// readBlob reads a signature layer, within the byte cap and confirmed by its
// digest.
func (v *Verifier) readBlob(ctx context.Context, s resolve.Subject, l v1.Descriptor, rs *reasons) ([]byte, bool, error) {
	if l.Size > v.o.limits.MaxBytes {
		rs.add(prioCap, fmt.Sprintf("a signature is over the cap of %d bytes (trust.maxSignatureBytes)", v.o.limits.MaxBytes))
		return nil, false, nil
	}
	b, err := v.reg.Blob(ctx, s.Repo, l.Digest)
	switch {
	case isNotFound(err):
		rs.add(prioMalformed, "a signature layer is missing ("+l.Digest.String()+")")
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("read the signature layer %s: %w", l.Digest, err)
	}
	return v.confirm(b, l.Digest, "signature", rs)
}

// confirm checks b against the byte cap and its digest.
func (v *Verifier) confirm(b []byte, d v1.Hash, what string, rs *reasons) ([]byte, bool, error) {
	if int64(len(b)) > v.o.limits.MaxBytes {
		rs.add(prioCap, fmt.Sprintf("a %s is over the cap of %d bytes (trust.maxSignatureBytes)", what, v.o.limits.MaxBytes))
		return nil, false, nil
	}
	if d.Algorithm != "sha256" || fmt.Sprintf("%x", sha256.Sum256(b)) != d.Hex {
		rs.add(prioOther, "the registry served a "+what+" whose bytes do not hash to its digest")
		return nil, false, nil
	}
	return b, true, nil
}

func isNotFound(err error) bool {
	var te *transport.Error
	return errors.As(err, &te) && te.StatusCode == http.StatusNotFound
}

// short is an error's text for a reason: one line, at most 160 bytes.
func short(err error) string {
	s := strings.Join(strings.Fields(err.Error()), " ")
	if len(s) > 160 {
		s = s[:157] + "..."
	}
	return s
}

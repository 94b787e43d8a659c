package resolve

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
)

// SignatureSkipPrefix begins the reason of a candidate skipped because it carries
// no signature satisfying the requirement (Skip.Reason, Consideration.Reason).
const SignatureSkipPrefix = "signature: "

// walk goes down a resolution's ordered candidates: the first that has every
// required platform and, when a signature is required, verifies, wins.
type walk struct {
	r      *Resolver
	in     *inspector
	repo   name.Repository
	p      *Policy
	trust  *Trust
	listed map[string]bool
	res    *Result

	verifyTried int      // candidates whose signatures were checked
	unverified  []string // "tag: reason" of each candidate that failed the check
}

func (w *walk) run(ctx context.Context, ordered []string) (*Result, error) {
	for _, t := range ordered {
		info, err := w.platformInfo(ctx, t)
		if err != nil {
			return nil, err
		}
		if info != nil && w.skipPlatforms(t, info) {
			continue
		}
		if info, err = w.digestInfo(ctx, t, info); err != nil {
			return nil, err
		}
		if w.trust != nil {
			if w.verifyTried == w.r.verifyCandidates {
				return nil, w.verifyExhausted(len(ordered))
			}
			v, err := w.verify(ctx, t, info)
			if err != nil {
				return nil, err
			}
			if v == nil {
				continue
			}
			w.res.Verified = v
		}
		return w.choose(t, info), nil
	}
	if w.trust != nil && len(w.unverified) > 0 {
		return nil, w.verifyExhausted(len(ordered))
	}
	return nil, w.noPlatformMatch(len(ordered))
}

// platformInfo is what was learnt of a candidate's platforms, reading its
// manifest when platforms are required and it was not inspected yet; nil when no
// platform is required and nothing was read.
func (w *walk) platformInfo(ctx context.Context, t string) (*TagInfo, error) {
	info := w.in.info(t)
	if info == nil && len(w.p.platforms) > 0 {
		var err error
		if info, err = inspect(ctx, w.r.reg, w.repo, t, false, w.p.platforms); err != nil {
			return nil, w.r.digestTagMissing(w.p, w.res, err)
		}
	}
	return info, nil
}

// skipPlatforms records t as skipped and reports true when it lacks a required
// platform.
func (w *walk) skipPlatforms(t string, info *TagInfo) bool {
	if len(w.p.platforms) == 0 {
		return false
	}
	missing := missingPlatforms(info.Platforms, w.p.platforms)
	if len(missing) == 0 {
		return false
	}
	skip := Skip{Tag: t, Platforms: PlatformStrings(info.Platforms), Missing: PlatformStrings(missing),
		Reason: fmt.Sprintf("no manifest for %s (has %s)", joinPlatforms(missing), joinPlatforms(info.Platforms))}
	w.res.Skipped = append(w.res.Skipped, skip)
	w.res.Considered = append(w.res.Considered, Consideration{Tag: t, Outcome: "skipped", Reason: skip.Reason,
		Platforms: info.Platforms, Created: info.Created})
	return true
}

// digestInfo makes sure the candidate's digest is known (a HEAD when nothing was
// read), confirming it by the manifest's bytes when it will be pinned.
func (w *walk) digestInfo(ctx context.Context, t string, info *TagInfo) (*TagInfo, error) {
	if info != nil && info.listed && w.pinned() {
		// A metadata API's digest is confirmed by the manifest's bytes before it
		// is pinned, as a HEAD's is.
		if err := w.r.confirmDigest(ctx, w.repo, w.res.Image+":"+t, info.Digest); err != nil {
			return nil, err
		}
	}
	if info != nil {
		return info, nil
	}
	d, err := w.r.reg.Head(ctx, w.repo, t)
	if err != nil {
		return nil, w.r.digestTagMissing(w.p, w.res, err)
	}
	if w.pinned() {
		// The HEAD's digest is the registry's Docker-Content-Digest header:
		// confirm it by the manifest's own bytes before pinning it.
		if err := w.r.confirmDigest(ctx, w.repo, w.res.Image+":"+t, d.Digest); err != nil {
			return nil, err
		}
	}
	return &TagInfo{Digest: d.Digest, MediaType: d.MediaType}, nil
}

func (w *walk) pinned() bool { return w.p.pinDigest || w.p.strategy == Digest }

// verify checks t's signatures; nil, nil when it is skipped for want of one.
func (w *walk) verify(ctx context.Context, t string, info *TagInfo) (*Verified, error) {
	w.verifyTried++
	v, err := w.r.verifier.Verify(ctx, Subject{Repo: w.repo, Tag: t, Digest: info.Digest,
		MediaType: info.MediaType, Tags: w.listed}, w.trust)
	var ue *UnverifiedError
	if errors.As(err, &ue) {
		reason := SignatureSkipPrefix + ue.Reason
		w.unverified = append(w.unverified, t+": "+ue.Reason)
		w.res.Skipped = append(w.res.Skipped, Skip{Tag: t, Reason: reason})
		w.res.Considered = append(w.res.Considered, Consideration{Tag: t, Outcome: "skipped", Reason: reason,
			Platforms: info.Platforms, Created: info.Created})
		return nil, nil
	}
	var ie *InputError
	if errors.As(err, &ie) {
		return nil, err // about the requirement, not this tag (a key the operator does not have)
	}
	if err != nil {
		return nil, fmt.Errorf("check the signatures of %s:%s: %w", w.res.Image, t, err)
	}
	return v, nil
}

func (w *walk) choose(t string, info *TagInfo) *Result {
	res := w.res
	res.Tag, res.Digest = t, info.Digest.String()
	res.Pinned = w.pinned()
	res.Reference = res.ReferenceFor(res.Image)
	reason := chosenReason(w.p)
	if res.Verified != nil {
		reason += ", signed by " + res.Verified.Describe()
	}
	res.Considered = append(res.Considered, Consideration{Tag: t, Outcome: "chosen",
		Reason: reason, Platforms: info.Platforms, Created: info.Created})
	return res
}

// verifyExhausted is the error when no candidate's signature verified: how many
// were tried (at most verifyCandidates) and why each failed.
func (w *walk) verifyExhausted(candidates int) error {
	bound := ""
	if w.verifyTried == w.r.verifyCandidates && candidates > w.verifyTried {
		bound = fmt.Sprintf(" (the first %d of %d candidates: trust.verifyCandidates)", w.verifyTried, candidates)
	}
	return &NoTagError{Image: w.res.Image, Result: w.res,
		Reason: fmt.Sprintf("no candidate is signed by %s: tried %d%s: %s",
			w.trust.Describe(), w.verifyTried, bound, strings.Join(w.unverified, "; "))}
}

func (w *walk) noPlatformMatch(candidates int) error {
	var has []string
	for i, sk := range w.res.Skipped {
		if i == 5 {
			has = append(has, fmt.Sprintf("and %d more", len(w.res.Skipped)-i))
			break
		}
		has = append(has, fmt.Sprintf("%s has %s", sk.Tag, strings.Join(sk.Platforms, ",")))
	}
	return &NoTagError{Image: w.res.Image, Result: w.res,
		Reason: fmt.Sprintf("none of %d candidates has every required platform (%s): %s",
			candidates, joinPlatforms(w.p.platforms), strings.Join(has, "; "))}
}

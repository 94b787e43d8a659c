package resolve

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// Result is a resolution: the tag chosen and why.
type Result struct {
	// Image is the repository as written.
	Image string `json:"image"`
	Tag   string `json:"tag"`
	// Digest is the digest the tag points at (the index digest for multi-arch images).
	Digest string `json:"digest"`
	// Reference is what a manifest gets: image:tag, or image:tag@digest when pinning.
	Reference string `json:"reference"`
	// Pinned says that references carry the digest (pin-digest, or the digest
	// strategy).
	Pinned   bool     `json:"pinned,omitempty"`
	Strategy Strategy `json:"strategy"`
	// Platforms are the platforms that were required.
	Platforms []string `json:"platforms"`
	// Candidates is how many tags passed the filters and the strategy.
	Candidates int `json:"candidates"`
	// Skipped lists every tag better than the winner that was passed over.
	Skipped []Skip `json:"skipped"`
	// Considered is the whole walk, for --explain.
	Considered []Consideration `json:"-"`
	// Rejected lists tags left out by filters or the strategy, for --explain.
	Rejected []Rejection `json:"-"`
	// Warnings about the policy (deprecated names).
	Warnings []string `json:"warnings,omitempty"`
	// Stale lists the cached answers past their TTL this result was built on because
	// the registry failed (stale-if-error); empty when everything was fresh.
	Stale []string `json:"stale,omitempty"`
	// Verified names the signature the chosen tag carries, when a signature was
	// required (by the policy or the operator's requireSignature).
	Verified *Verified `json:"verified,omitempty"`
	// InvalidTags is how many listed tags broke the OCI tag grammar
	// ([A-Za-z0-9_][A-Za-z0-9._-]{0,127}) and were skipped before any filter or
	// strategy saw them (a Warning says so, quoting at most one, truncated).
	InvalidTags int `json:"invalidTags,omitempty"`
	// MetadataAPI names the registry's metadata API the tags were listed through
	// (dockerhub, harbor, ...; "" for the OCI protocol); MetadataFallback says why
	// an API configured for the registry could not answer (the OCI protocol did).
	MetadataAPI      string `json:"metadataAPI,omitempty"`
	MetadataFallback string `json:"metadataFallback,omitempty"`
	// ConfigReads is how many candidates' build times or platforms the native path
	// read through the OCI protocol (a manifest and a config each), for --explain;
	// BuildTimeReads how many it asked the metadata API for (BuildTimer).
	ConfigReads    int `json:"-"`
	BuildTimeReads int `json:"-"`
}

// ReferenceFor is the reference a manifest gets for the chosen tag, spelled with
// repository (the image as a manifest wrote it): repository:tag, or
// repository:tag@digest when pinned.
func (r *Result) ReferenceFor(repository string) string {
	ref := repository + ":" + r.Tag
	if r.Pinned {
		ref += "@" + r.Digest
	}
	return ref
}

// Skip is a tag better than the winner that was passed over.
type Skip struct {
	Tag    string `json:"tag"`
	Reason string `json:"reason"`
	// Platforms the tag has, when it was skipped for a missing platform.
	Platforms []string `json:"platforms,omitempty"`
	// Missing are the required platforms it lacks.
	Missing []string `json:"missing,omitempty"`
}

// Rejection is a tag that never became a candidate.
type Rejection struct {
	Tag    string `json:"tag"`
	Reason string `json:"reason"`
}

// Consideration is one step of the walk down the ordered candidates.
type Consideration struct {
	Tag       string
	Outcome   string // "chosen", "skipped"
	Reason    string
	Platforms []Platform
	Created   time.Time
}

// Resolver finds the tag to deploy for a repository and a policy.
type Resolver struct {
	reg         Registry
	concurrency int
	authorizers []Authorizer
	observers   []Observer

	verifier         SignatureVerifier
	requiredTrust    RequiredTrust
	verifyCandidates int
	filterMaxCost    int // bound of a policy's filters' estimated cost over a tag list

	// metadataFor gives a repository's metadata API (native.go); nil: none.
	metadataFor        MetadataAPIFor
	onMetadataFallback func(api string, err error)
	clockSkew          time.Duration

	// slots bounds the tags inspected at once per registry host across every
	// resolution of this Resolver (concurrency each): 500 cold resolutions at once
	// hold 64 goroutines per registry, not 500 x 64.
	slotsMu sync.Mutex
	slots   map[string]chan struct{}
}

// Observer is told of every request ResolveBatch or ResolveRequest answered, with
// how long it took (the daemon's resolution histogram).
type Observer func(req Request, a Answer, took time.Duration)

// WithObserver adds an Observer.
func WithObserver(o Observer) ResolverOption {
	return func(r *Resolver) {
		if o != nil {
			r.observers = append(r.observers, o)
		}
	}
}

// Authorizer decides, before any cache or network access, whether the app in ctx
// (AppFrom) may resolve repo; a non-nil error refuses.
type Authorizer func(ctx context.Context, repo name.Repository) error

// WithAuthorizer adds a check run at the start of every Resolve, before the
// registry (or the daemon's cached view of it) is read: the place for the app
// scoping of registry entries (RegistryTable.Authorize). Its error is returned
// wrapped in a *RegistryError. Whoever builds a Resolver over configured registries
// passes it here: nothing is found by looking at the Registry.
func WithAuthorizer(a Authorizer) ResolverOption {
	return func(r *Resolver) {
		if a != nil {
			r.authorizers = append(r.authorizers, a)
		}
	}
}

// ResolverOption configures a Resolver.
type ResolverOption func(*Resolver)

// WithConcurrency bounds how many tags are inspected at once per registry host,
// across all resolutions of the Resolver (default 8). It bounds goroutines, not
// requests: give it the registry's concurrency bound (the daemon and generate do,
// from registryConcurrency), so that the governor of requests in flight
// (Limiter) is the one that decides.
func WithConcurrency(n int) ResolverOption {
	return func(r *Resolver) { r.concurrency = max(n, 1) }
}

// RequiredTrust returns the operator's signature requirement for a repository
// (nil: none) and who set it, for messages (`registries entry "ghcr.io/org"`).
type RequiredTrust func(repo name.Repository) (t *Trust, by string)

// WithSignatureVerifier sets how candidates' signatures are checked when a policy
// or the operator requires one. Without it such a resolution fails with an error
// saying signatures cannot be checked: never an unchecked tag.
func WithSignatureVerifier(v SignatureVerifier) ResolverOption {
	return func(r *Resolver) { r.verifier = v }
}

// WithRequiredTrust adds the operator's per-registry requirement to every policy
// (an app's own verify narrows it; a conflict is an input error).
func WithRequiredTrust(f RequiredTrust) ResolverOption {
	return func(r *Resolver) { r.requiredTrust = f }
}

// WithVerifyCandidates bounds the candidates one resolution checks for a signature
// (default DefaultVerifyCandidates).
func WithVerifyCandidates(n int) ResolverOption {
	return func(r *Resolver) {
		if n > 0 {
			r.verifyCandidates = n
		}
	}
}

// NewResolver returns a Resolver reading from reg.
func NewResolver(reg Registry, opts ...ResolverOption) *Resolver {
	r := &Resolver{reg: reg, concurrency: 8, slots: map[string]chan struct{}{}, verifyCandidates: DefaultVerifyCandidates,
		filterMaxCost: DefaultTagFilterMaxCost, clockSkew: DefaultClockSkew}
	for _, o := range opts {
		o(r)
	}
	return r
}

// authorize runs the authorizers; a refusal is a *RegistryError (exit status 3)
// wrapping the authorizer's error (an *AuthError for app scoping).
func (r *Resolver) authorize(ctx context.Context, repo name.Repository, written string) error {
	for _, a := range r.authorizers {
		if err := a(ctx, repo); err != nil {
			image := written
			if image == "" {
				image = repo.String()
			}
			return &RegistryError{Op: "authorize", Image: image, Err: err}
		}
	}
	return nil
}

// Resolve finds the best tag of repo (written is how the user spelled it) that the
// policy allows and that has every required platform. It never answers from partial
// data: if a tag that could win cannot be read, it returns the registry's error.
// When no tag qualifies it returns a *NoTagError holding the partial Result. The
// authorizers (WithAuthorizer) run first, before anything is read.
func (r *Resolver) Resolve(ctx context.Context, repo name.Repository, written string, p *Policy) (*Result, error) {
	if err := r.authorize(ctx, repo, written); err != nil {
		return nil, err
	}
	ctx, stale := withStaleRecorder(ctx)
	res, err := r.resolve(ctx, repo, written, p)
	if res != nil {
		res.Stale = stale.list()
	}
	var nt *NoTagError
	if errors.As(err, &nt) && nt.Result != nil {
		nt.Result.Stale = stale.list()
	}
	return res, err
}

func (r *Resolver) resolve(ctx context.Context, repo name.Repository, written string, p *Policy) (*Result, error) {
	res := &Result{Image: written, Strategy: p.strategy, Platforms: PlatformStrings(p.platforms),
		Skipped: []Skip{}, Warnings: p.Warnings()}
	if res.Image == "" {
		res.Image = repo.String()
	}
	trust, err := r.trustFor(repo, p)
	if err != nil {
		return nil, err
	}

	in := r.newInspector(ctx, repo, p)
	defer in.stop()
	var tags []string
	var listed map[string]bool        // nil when the repository was not listed
	var records map[string]*TagRecord // the metadata API's, nil on the OCI path
	native := false
	api := r.metadataAPI(repo, p)
	if api != nil {
		records, tags, native = r.listNative(ctx, api, repo, in, res)
	}
	if p.strategy == Digest {
		// Only one tag can win: no need to list the repository.
		tags = []string{p.constraint}
	} else {
		lctx := ctx
		if p.strategy == NewestBuild && !native {
			// Every candidate's metadata is needed: start reading it as pages come.
			lctx = withTagPages(ctx, in.page)
		}
		if !native {
			if tags, err = r.reg.ListTags(lctx, repo); err != nil {
				return nil, err
			}
		}
		if trust != nil {
			listed = make(map[string]bool, len(tags))
			for _, t := range tags {
				listed[t] = true
			}
		}
		tags = skipInvalidTags(res, tags)
		if err := r.checkFilterCost(p, res.Image, tags); err != nil {
			return nil, err
		}
	}

	allowed, err := filterTags(ctx, p, res, tags)
	if err != nil {
		return nil, stoppedIn(res.Image, err)
	}
	var ordered []string
	var rejected []Rejection
	if native && p.strategy == NewestBuild && trust == nil {
		var ok bool
		if ordered, ok, err = r.nativeNewest(ctx, api, repo, p, in, records, allowed, res); err != nil {
			return nil, err
		}
		if ok {
			res.Candidates = len(allowed)
			w := walk{r: r, in: in, repo: repo, p: p, trust: trust, listed: listed, res: res}
			return w.run(ctx, ordered)
		}
	}
	ordered, rejected, err = p.order.order(ctx, allowed, in.meta)
	if err != nil {
		return nil, stoppedIn(res.Image, err)
	}
	res.Rejected = append(res.Rejected, rejected...)
	res.Candidates = len(ordered)
	if len(ordered) == 0 {
		return nil, &NoTagError{Image: res.Image, Reason: noCandidateReason(p, len(tags), len(allowed)), Result: res}
	}
	w := walk{r: r, in: in, repo: repo, p: p, trust: trust, listed: listed, res: res}
	return w.run(ctx, ordered)
}

// filterTags is the tags allow-tags and ignore-tags let through, recording in res
// why each other one was rejected; it stops with ctx or its waiter.
func filterTags(ctx context.Context, p *Policy, res *Result, tags []string) ([]string, error) {
	var allowed []string
	s := newStopper(ctx)
	for i, t := range tags {
		if s.step() {
			return nil, s.err(filterStep(p), i, len(tags))
		}
		if IsArtifactTag(t) {
			res.Rejected = append(res.Rejected, Rejection{Tag: t, Reason: artifactTagReason})
		} else if ok, why := p.allowed(t); ok {
			allowed = append(allowed, t)
		} else {
			res.Rejected = append(res.Rejected, Rejection{Tag: t, Reason: why})
		}
	}
	return allowed, nil
}

// filterStep names the filtering of p, for a StoppedError.
func filterStep(p *Policy) string {
	_, worst, field := p.filterCost(1)
	return fmt.Sprintf("matching %s %s", field, quoteTrunc(worst.String(), 120))
}

// stoppedIn names image in a *StoppedError err is; other errors pass through.
func stoppedIn(image string, err error) error {
	var se *StoppedError
	if errors.As(err, &se) && se.Image == "" {
		se.Image = image
	}
	return err
}

// trustFor is the signature requirement of a resolution: the operator's for the
// repository's registry, narrowed by the policy's own.
func (r *Resolver) trustFor(repo name.Repository, p *Policy) (*Trust, error) {
	var required *Trust
	var by string
	if r.requiredTrust != nil {
		required, by = r.requiredTrust(repo)
	}
	trust, err := MergeTrust(required, by, p.trust)
	if err != nil {
		return nil, err
	}
	if trust != nil && r.verifier == nil {
		return nil, fmt.Errorf("%s requires a signature (%s), but this resolver has no signature verifier", repo, trust.Describe())
	}
	return trust, nil
}

// inspectSlots is the bound of tags inspected at once on a registry host.
func (r *Resolver) inspectSlots(host string) chan struct{} {
	r.slotsMu.Lock()
	defer r.slotsMu.Unlock()
	c, ok := r.slots[host]
	if !ok {
		c = make(chan struct{}, r.concurrency)
		r.slots[host] = c
	}
	return c
}

// confirmDigest fetches the manifest by the digest a HEAD claimed and checks that
// its bytes hash to it (Remote's GET by digest hashes the body; a content
// addressed cache serves it again for free). A registry whose header lies fails
// with a *DigestMismatchError.
func (r *Resolver) confirmDigest(ctx context.Context, repo name.Repository, image string, claimed v1.Hash) error {
	m, err := r.reg.Manifest(ctx, repo, claimed.String())
	if err != nil {
		var te *transport.Error
		if isDigestMismatch(err) || (errors.As(err, &te) && te.StatusCode == http.StatusNotFound) {
			return &DigestMismatchError{Image: image, Claimed: claimed.String(), Err: err}
		}
		return err
	}
	if m.Digest != claimed {
		return &DigestMismatchError{Image: image, Claimed: claimed.String(), Actual: m.Digest.String()}
	}
	if got := digestOf(m.Raw, claimed.Algorithm); got != "" && got != claimed.String() {
		return &DigestMismatchError{Image: image, Claimed: claimed.String(), Actual: got}
	}
	return nil
}

// skipInvalidTags drops the tags that break the OCI tag grammar, counting them in
// res and saying so in a warning that quotes one, truncated.
func skipInvalidTags(res *Result, tags []string) []string {
	valid := tags[:0:0]
	var first string
	for _, t := range tags {
		if ociTagOK(t) {
			valid = append(valid, t)
			continue
		}
		if res.InvalidTags == 0 {
			first = t
		}
		res.InvalidTags++
	}
	if res.InvalidTags == 0 {
		return tags
	}
	res.Warnings = append(res.Warnings, fmt.Sprintf(
		"the registry listed %d tags that are not valid OCI tags, skipped (e.g. %s)", res.InvalidTags, quoteTrunc(first, 40)))
	return valid
}

// digestTagMissing turns "manifest unknown" for the followed tag of the digest
// strategy (which is not listed first) into a NoTagError; other errors pass through.
func (r *Resolver) digestTagMissing(p *Policy, res *Result, err error) error {
	var te *transport.Error
	if p.strategy == Digest && errors.As(err, &te) && te.StatusCode == http.StatusNotFound {
		return &NoTagError{Image: res.Image, Result: res, Reason: fmt.Sprintf("tag %q not found", p.constraint)}
	}
	return err
}

func noCandidateReason(p *Policy, listed, allowed int) string {
	switch {
	case p.strategy == Digest:
		return fmt.Sprintf("tag %q not found", p.constraint)
	case listed == 0:
		return "the repository has no tags"
	case allowed == 0:
		return fmt.Sprintf("all %d tags are excluded by allow-tags/ignore-tags", listed)
	case p.strategy == Semver && p.constraint != "":
		return fmt.Sprintf("none of %d tags is a semantic version within %q", allowed, p.constraint)
	case p.strategy == Semver:
		return fmt.Sprintf("none of %d tags is a released semantic version", allowed)
	case p.strategy == Numeric:
		return fmt.Sprintf("none of %d tags is an integer", allowed)
	}
	return fmt.Sprintf("none of %d tags can be ordered by %s", allowed, p.strategy)
}

func chosenReason(p *Policy) string {
	var why string
	switch p.strategy {
	case Semver:
		why = "highest semantic version"
		if p.constraint != "" {
			why += " within " + p.constraint
		}
	case NewestBuild:
		why = "newest build"
	case Digest:
		why = "the followed tag, pinned to its current digest"
	case Alphabetical:
		why = "last in byte order"
	case Numeric:
		why = "largest number"
	}
	if len(p.platforms) > 0 {
		why += ", has " + joinPlatforms(p.platforms)
	}
	return why
}

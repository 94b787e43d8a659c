package daemon

import (
	"context"
	"sync"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// readingRegistry is the registry view the daemon's resolver reads through: it
// counts the reads in flight per repository, so that a render that gave up is told
// the registry view is still being filled only when it is.
type readingRegistry struct {
	referringRegistry
	mu       sync.Mutex
	inFlight map[string]int // repository -> reads in flight
}

// referringRegistry is a registry view with the referrers API that keeps
// manifest facts (cache.Registry).
type referringRegistry interface {
	resolve.Registry
	resolve.ReferrersLister
	resolve.ManifestFactsCache
}

func newReadingRegistry(reg referringRegistry) *readingRegistry {
	return &readingRegistry{referringRegistry: reg, inFlight: map[string]int{}}
}

// reading reports whether a read of repo (as resolve.RepoOf names it) is in flight.
func (r *readingRegistry) reading(repo string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.inFlight[repo] > 0
}

// enter counts a read of repo; the function it returns ends it.
func (r *readingRegistry) enter(repo name.Repository) func() {
	k := repo.String()
	r.mu.Lock()
	r.inFlight[k]++
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.inFlight[k]--; r.inFlight[k] == 0 {
			delete(r.inFlight, k)
		}
	}
}

// ListTags implements resolve.Registry.
func (r *readingRegistry) ListTags(ctx context.Context, repo name.Repository) ([]string, error) {
	defer r.enter(repo)()
	return r.referringRegistry.ListTags(ctx, repo)
}

// Head implements resolve.Registry.
func (r *readingRegistry) Head(ctx context.Context, repo name.Repository, tag string) (v1.Descriptor, error) {
	defer r.enter(repo)()
	return r.referringRegistry.Head(ctx, repo, tag)
}

// Manifest implements resolve.Registry.
func (r *readingRegistry) Manifest(ctx context.Context, repo name.Repository, ref string) (*resolve.Manifest, error) {
	defer r.enter(repo)()
	return r.referringRegistry.Manifest(ctx, repo, ref)
}

// Blob implements resolve.Registry.
func (r *readingRegistry) Blob(ctx context.Context, repo name.Repository, digest v1.Hash) ([]byte, error) {
	defer r.enter(repo)()
	return r.referringRegistry.Blob(ctx, repo, digest)
}

// Referrers implements resolve.ReferrersLister.
func (r *readingRegistry) Referrers(ctx context.Context, repo name.Repository, digest v1.Hash) (*resolve.Manifest, error) {
	defer r.enter(repo)()
	return r.referringRegistry.Referrers(ctx, repo, digest)
}

// ManifestFacts implements resolve.ManifestFactsCache: the view keeps facts
// rather than documents.
func (r *readingRegistry) ManifestFacts(ctx context.Context, repo name.Repository, ref string, derive resolve.DeriveFacts) (resolve.ManifestFacts, error) {
	defer r.enter(repo)()
	return r.referringRegistry.ManifestFacts(ctx, repo, ref, derive)
}

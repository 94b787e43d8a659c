package resolve

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
)

// Request asks for one image to be resolved. It is plain data so that it can cross
// the daemon's socket: the policy travels as written and is compiled where it is
// resolved.
type Request struct {
	// Image is the repository as written in the manifest or policy.
	Image string `json:"image"`
	// Policy is the policy with the effective required platforms filled in.
	Policy PolicySpec `json:"policy"`
}

// Answer is the outcome of one Request: a Result, or an error of a known kind.
type Answer struct {
	Result *Result `json:"result,omitempty"`
	// Error is the message of a failed resolution; ErrorKind says which kind it was.
	Error     string    `json:"error,omitempty"`
	ErrorKind ErrorKind `json:"errorKind,omitempty"`
}

// ErrorKind classifies a failed resolution, so that exit codes and messages survive
// a trip over the socket.
type ErrorKind string

// Error kinds.
const (
	KindInput    ErrorKind = "input"
	KindNoTag    ErrorKind = "no-tag"
	KindRegistry ErrorKind = "registry"
	KindInternal ErrorKind = "internal"
)

// Err turns a failed Answer back into an error that errors.Is/As understand.
func (a Answer) Err() error {
	switch {
	case a.Error == "":
		return nil
	case a.ErrorKind == KindNoTag:
		return &NoTagError{Image: imageOf(a), Reason: a.Error, Result: a.Result, message: a.Error}
	case a.ErrorKind == KindInput:
		return &InputError{Err: errors.New(a.Error), message: a.Error}
	case a.ErrorKind == KindRegistry:
		return &RegistryError{Op: "resolve", Image: imageOf(a), Err: errors.New(a.Error), message: a.Error}
	}
	return errors.New(a.Error)
}

func imageOf(a Answer) string {
	if a.Result != nil {
		return a.Result.Image
	}
	return ""
}

// AnswerOf wraps a resolution's outcome as an Answer.
func AnswerOf(res *Result, err error) Answer {
	if err == nil {
		return Answer{Result: res}
	}
	a := Answer{Error: err.Error(), ErrorKind: KindInternal}
	var nt *NoTagError
	var ie *InputError
	var re *RegistryError
	switch {
	case errors.As(err, &nt):
		a.ErrorKind, a.Result = KindNoTag, nt.Result
	case errors.As(err, &ie):
		a.ErrorKind = KindInput
	case errors.As(err, &re):
		a.ErrorKind = KindRegistry
	}
	return a
}

// Batch resolves many requests; the daemon's client and the local resolver both
// implement it, so `generate` works the same with or without the daemon.
type Batch interface {
	ResolveBatch(ctx context.Context, app string, reqs []Request) ([]Answer, error)
}

// ResolveBatch resolves requests concurrently, one Answer per request in order.
// Identical requests are resolved once: this is the one place requests are
// deduplicated, for the CLI, the fallback and the daemon alike. The app travels in
// the context (WithApp) to the authorizers and keychains.
func (r *Resolver) ResolveBatch(ctx context.Context, app string, reqs []Request) ([]Answer, error) {
	if app != "" {
		ctx = WithApp(ctx, app)
	}
	answers := make([]Answer, len(reqs))
	groups := map[string][]int{} // request key -> indexes of identical requests
	var order []string
	for i, req := range reqs {
		k := req.Key()
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], i)
	}
	var wg sync.WaitGroup
	for _, k := range order {
		idx := groups[k]
		wg.Go(func() {
			a := r.ResolveRequest(ctx, reqs[idx[0]])
			for _, i := range idx {
				answers[i] = a
			}
		})
	}
	wg.Wait()
	return answers, nil
}

// ResolveRequest compiles and resolves one request, and tells the observers.
func (r *Resolver) ResolveRequest(ctx context.Context, req Request) Answer {
	start := time.Now()
	a := r.resolveRequest(ctx, req)
	for _, o := range r.observers {
		o(req, a, time.Since(start))
	}
	return a
}

func (r *Resolver) resolveRequest(ctx context.Context, req Request) Answer {
	p, err := req.Policy.Compile()
	if err != nil {
		return AnswerOf(nil, err)
	}
	repo, err := newRepository(req.Image)
	if err != nil {
		return AnswerOf(nil, &InputError{Field: "image", Value: req.Image, Accepted: "a repository name", Err: err})
	}
	return AnswerOf(r.Resolve(ctx, repo, req.Image, p))
}

// Key is a comparable form of a request: equal keys resolve alike (ResolveBatch
// sends each once).
func (r Request) Key() string { return r.Image + "\x00" + specKey(r.Policy) }

// specKey is a comparable form of a policy spec.
func specKey(s PolicySpec) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// RepoOf parses the repository of a request's image.
func RepoOf(image string) (name.Repository, error) { return newRepository(image) }

package webhook

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
)

// Event is one push a registry told of.
type Event struct {
	// Kind is the sender's kind, as in the path: "distribution", "github", ...
	Kind string
	// Registry is the registry's host[:port] as the payload names it, lower case;
	// Docker Hub is "docker.io" (never index.docker.io or registry-1.docker.io).
	// It is "" when the payload does not say.
	Registry string
	// Repository is the repository's path in the registry, e.g. "team/app";
	// Docker Hub's official images are under "library/", e.g. "library/nginx".
	Repository string
	// Tag is the tag pushed, "" when the event names only a digest.
	Tag string
	// Digest is the manifest's digest, "" when the payload gives none.
	Digest string
}

// Sink receives the pushes of valid, authenticated deliveries.
type Sink interface {
	// Push is told of one push, on the request's goroutine and with its context,
	// once for each push a delivery carries. It reports whether some app uses
	// the repository (counted as accepted, else unused). It must return quickly:
	// record the push and leave long work to others; the sender is waiting. An
	// error says the push was not taken (the daemon out of reach): the delivery
	// is answered 503 so that its sender retries, and is not remembered as seen.
	Push(ctx context.Context, ev Event) (used bool, err error)
}

// Secrets are the shared secrets by kind. A kind without a secret is not served:
// its paths answer 404.
type Secrets map[string][]byte

// MinSecretLength is the shortest secret NewHandler accepts, in bytes: a secret
// may travel in a URL path, where a short one could be guessed.
const MinSecretLength = 16

// pathPrefix is where the handler serves: /webhooks/<kind>[/<token>].
const pathPrefix = "/webhooks/"

// kindSpec is how one kind authenticates and what its payload is.
type kindSpec struct {
	auth  authScheme
	parse parseFunc
	// bodyReplay: an event without an id of the sender's is remembered by the
	// SHA-256 of the body. Off where the payload has no id, time or digest
	// (quay): a byte-identical body is then a new push of the same tag as often
	// as it is a retry, and a missed push is worse than a repeated one.
	bodyReplay bool
}

var kinds = map[string]kindSpec{
	"distribution": {auth: authBearer, parse: parseDistribution, bodyReplay: true},
	"dockerhub":    {auth: authTokenOrBearer, parse: parseDockerHub, bodyReplay: true},
	"github":       {auth: authHubSignature, parse: parseGitHub, bodyReplay: true},
	"harbor":       {auth: authHarbor, parse: parseHarbor, bodyReplay: true},
	"quay":         {auth: authTokenOrBearer, parse: parseQuay},
	"acr":          {auth: authTokenOrBearer, parse: parseACR, bodyReplay: true},
	"gar":          {auth: authTokenOrBearer, parse: parseGAR, bodyReplay: true},
	"ecr":          {auth: authTokenOrBearer, parse: parseECR, bodyReplay: true},
	"zot":          {auth: authTokenOrBearer, parse: parseZot, bodyReplay: true},
	"gitea":        {auth: authGiteaSignature, parse: parseGitea, bodyReplay: true},
}

// Kinds are the kinds of sender served, sorted: the <kind> of /webhooks/<kind>.
func Kinds() []string {
	out := make([]string, 0, len(kinds))
	for k := range kinds {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TakesPathToken reports whether kind may carry its secret as the path token of
// /webhooks/<kind>/<secret> (the kinds whose senders cannot set a header or sign).
func TakesPathToken(kind string) bool {
	spec, ok := kinds[kind]
	return ok && spec.auth.takesPathToken()
}

// served is a configured kind.
type served struct {
	name            string
	spec            kindSpec
	secret          secret
	unauthorizedLog logSampler
}

// Handler serves POST /webhooks/<kind> and /webhooks/<kind>/<token>: it
// authenticates, bounds, parses, drops replays, rate limits and counts
// deliveries, and hands their pushes to a Sink. It expects the full path (mount
// it at "/webhooks/", not under http.StripPrefix) and is safe for concurrent use.
type Handler struct {
	kinds   map[string]*served
	sink    Sink
	log     *slog.Logger
	events  *prometheus.CounterVec
	limiter *rate.Limiter
	maxWait time.Duration
	sleep   func(ctx context.Context, d time.Duration) bool
	replays *replaySet // nil: replays are not detected
	maxBody int64
	now     func() time.Time
}

var _ http.Handler = (*Handler)(nil)

// NewHandler returns a Handler serving the kinds of secrets, handing pushes to
// sink. It fails on a kind it does not know, a secret shorter than
// MinSecretLength, a nil sink, or a registerer that refuses the metrics.
func NewHandler(secrets Secrets, sink Sink, opts ...Option) (*Handler, error) {
	if sink == nil {
		return nil, errors.New("webhook: no sink")
	}
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	served, err := serveKinds(secrets)
	if err != nil {
		return nil, err
	}
	events, err := newEventsCounter(cfg.registerer)
	if err != nil {
		return nil, err
	}
	for kind := range served {
		for _, o := range outcomes {
			events.WithLabelValues(kind, o) // every series from the start, at 0
		}
	}
	h := &Handler{kinds: served, sink: sink, log: cfg.log, events: events, maxBody: cfg.maxBody, now: cfg.now,
		limiter: rate.NewLimiter(cfg.rate, cfg.burst), maxWait: cfg.maxWait, sleep: cfg.sleep}
	if cfg.replayWindow > 0 && cfg.replayEntries > 0 {
		h.replays = newReplaySet(cfg.replayWindow, cfg.replayEntries)
	}
	return h, nil
}

// CheckSecrets reports what NewHandler would refuse in secrets: a kind it does
// not know, a secret shorter than MinSecretLength.
func CheckSecrets(secrets Secrets) error {
	_, err := serveKinds(secrets)
	return err
}

func serveKinds(secrets Secrets) (map[string]*served, error) {
	out := make(map[string]*served, len(secrets))
	for kind, sec := range secrets {
		spec, ok := kinds[kind]
		if !ok {
			return nil, fmt.Errorf("webhook: unknown kind %q (known: %s)", kind, strings.Join(Kinds(), ", "))
		}
		if len(sec) < MinSecretLength {
			return nil, fmt.Errorf("webhook: the %s secret is shorter than %d bytes", kind, MinSecretLength)
		}
		out[kind] = &served{name: kind, spec: spec, secret: newSecret(sec)}
	}
	return out, nil
}

// route finds the configured kind of r's path and its path token ("" when the
// path has none). A token on a kind that takes none, an empty token or a deeper
// path are not served.
func (h *Handler) route(r *http.Request) (srv *served, token string, ok bool) {
	rest, found := strings.CutPrefix(r.URL.EscapedPath(), pathPrefix)
	if !found {
		return nil, "", false
	}
	kind, rawToken, hasToken := strings.Cut(rest, "/")
	srv = h.kinds[kind]
	if srv == nil {
		return nil, "", false
	}
	if !hasToken {
		return srv, "", true
	}
	if !srv.spec.auth.takesPathToken() || rawToken == "" || strings.Contains(rawToken, "/") {
		return nil, "", false
	}
	token, err := url.PathUnescape(rawToken)
	if err != nil || token == "" {
		return nil, "", false
	}
	return srv, token, true
}

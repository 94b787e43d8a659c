package cache

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// staleable reports whether a failed fetch may be answered from an expired entry:
// the registry was unavailable, throttled or refused credentials, or the network
// failed. Definitive answers (404, other 4xx) and malformed content may not.
func staleable(err error) bool {
	var te *transport.Error
	if errors.As(err, &te) {
		switch s := te.StatusCode; {
		case s == http.StatusUnauthorized, s == http.StatusForbidden, s == http.StatusRequestTimeout,
			s == http.StatusTooManyRequests, s >= 500:
			return true
		}
		return false
	}
	var ue *url.Error
	var ne net.Error
	return errors.As(err, &ue) || errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded)
}

// headUnsupported reports whether a HEAD failed because the registry does not
// serve HEAD for manifests.
func headUnsupported(err error) bool {
	var te *transport.Error
	return errors.As(err, &te) && (te.StatusCode == http.StatusMethodNotAllowed ||
		te.StatusCode == http.StatusNotImplemented || te.StatusCode == http.StatusBadRequest)
}

func isNotFound(err error) bool {
	var te *transport.Error
	return errors.As(err, &te) && te.StatusCode == http.StatusNotFound
}

// describeError says briefly why a fetch failed, for stale reports.
func describeError(err error) string {
	var te *transport.Error
	if errors.As(err, &te) {
		return fmt.Sprintf("registry answered %d %s", te.StatusCode, http.StatusText(te.StatusCode))
	}
	var re *resolve.RegistryError
	if errors.As(err, &re) && re.Err != nil {
		return re.Err.Error()
	}
	return err.Error()
}

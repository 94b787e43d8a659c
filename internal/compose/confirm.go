package compose

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/argocd-image-resolver/argocd-image-resolver/pin"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// PinConfirmer is the pin writer's Confirmer (pin.WithConfirmer) over the
// registry client remote: one HEAD of the tag, past every cache (give it the
// Remote itself, not the cached view the resolver reads), with the client's
// credentials, rate limits, transport bounds and retries. A 404 (no such tag or
// repository) wraps pin.ErrNotInRegistry; any other failure is the registry's
// (the pin waits for the next round).
func PinConfirmer(remote *resolve.Remote) pin.Confirmer {
	return pin.ConfirmerFunc(func(ctx context.Context, image, tag string) (string, error) {
		repo, _, _, err := resolve.ParseImageSpec(image)
		if err != nil {
			return "", fmt.Errorf("pin image %s: %w: %w", image, pin.ErrNotInRegistry, err)
		}
		d, err := remote.Head(ctx, repo, tag)
		var te *transport.Error
		switch {
		case errors.As(err, &te) && te.StatusCode == http.StatusNotFound:
			return "", fmt.Errorf("%w: %w", pin.ErrNotInRegistry, err)
		case err != nil:
			return "", err
		}
		return d.Digest.String(), nil
	})
}

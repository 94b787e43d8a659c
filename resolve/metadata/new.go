package metadata

import (
	"strings"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// New returns the client of the metadata API kind (resolve.MetadataDockerHub,
// ...) for one registries entry.
func New(kind string, o Options) (resolve.MetadataAPI, error) {
	switch kind {
	case resolve.MetadataDockerHub:
		return NewDockerHub(o)
	case resolve.MetadataHarbor:
		return NewHarbor(o)
	case resolve.MetadataQuay:
		return NewQuay(o)
	case resolve.MetadataGAR:
		return NewGAR(o)
	case resolve.MetadataACR:
		return NewACR(o)
	case resolve.MetadataECR:
		return NewECR(o)
	}
	return nil, &resolve.InputError{Field: "metadataAPI", Value: kind, Accepted: strings.Join(resolve.MetadataAPIs, ", ")}
}

package webhook

import (
	"errors"
	"fmt"
	"net/http"
)

// registryEvent is one event of CNCF distribution's notifications
// (notifications.Event, sent in an envelope); Azure Container Registry's webhook
// sends one of the same shape alone.
type registryEvent struct {
	ID     string `json:"id"`
	Action string `json:"action"`
	Target struct {
		MediaType  string `json:"mediaType"`
		Digest     string `json:"digest"`
		Repository string `json:"repository"`
		Tag        string `json:"tag"`
	} `json:"target"`
	Request struct {
		Host string `json:"host"` // the registry's host, as the pushing client named it
	} `json:"request"`
}

// manifestMediaTypes are the media types of a manifest push; any other push
// (a blob, a layer) is not a new image.
var manifestMediaTypes = map[string]bool{
	"application/vnd.oci.image.manifest.v1+json":                true,
	"application/vnd.oci.image.index.v1+json":                   true,
	"application/vnd.oci.artifact.manifest.v1+json":             true,
	"application/vnd.docker.distribution.manifest.v2+json":      true,
	"application/vnd.docker.distribution.manifest.list.v2+json": true,
	"application/vnd.docker.distribution.manifest.v1+json":      true,
	"application/vnd.docker.distribution.manifest.v1+prettyjws": true,
}

// parseDistribution reads distribution's envelope
// (application/vnd.docker.distribution.events.v2+json): each manifest push is a
// push; pulls, deletes, mounts and blob pushes are not.
func parseDistribution(_ http.Header, body []byte) ([]item, error) {
	var env struct {
		Events []registryEvent `json:"events"`
	}
	if err := decodeObject(body, &env); err != nil {
		return nil, err
	}
	if len(env.Events) == 0 {
		return nil, errors.New("no events")
	}
	items := make([]item, 0, len(env.Events))
	for i, ev := range env.Events {
		it, err := distributionItem(ev)
		if err != nil {
			return nil, fmt.Errorf("events[%d]: %w", i, err)
		}
		items = append(items, it)
	}
	return items, nil
}

func distributionItem(ev registryEvent) (item, error) {
	switch {
	case ev.Action == "":
		return item{}, errors.New("no action")
	case ev.Action != "push":
		return ignoredItem(ev.ID, "action %s", quote(ev.Action)), nil
	case !manifestMediaTypes[ev.Target.MediaType]:
		return ignoredItem(ev.ID, "a push of media type %s, not a manifest", quote(ev.Target.MediaType)), nil
	case ev.Target.Repository == "":
		return item{}, errors.New("no target.repository")
	}
	return pushItem(ev.ID, ev.Request.Host, ev.Target.Repository, ev.Target.Tag, ev.Target.Digest)
}

// parseACR reads Azure Container Registry's webhook: action "push" is a push;
// chart_push, delete, chart_delete, quarantine and ping are not.
func parseACR(_ http.Header, body []byte) ([]item, error) {
	var ev registryEvent
	if err := decodeObject(body, &ev); err != nil {
		return nil, err
	}
	switch {
	case ev.Action == "":
		return nil, errors.New("no action")
	case ev.Action != "push":
		return []item{ignoredItem(ev.ID, "action %s", quote(ev.Action))}, nil
	case ev.Target.Repository == "":
		return nil, errors.New("no target.repository")
	}
	it, err := pushItem(ev.ID, ev.Request.Host, ev.Target.Repository, ev.Target.Tag, ev.Target.Digest)
	if err != nil {
		return nil, err
	}
	return []item{it}, nil
}

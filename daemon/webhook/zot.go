package webhook

import (
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strings"
)

// zotImageUpdated is the type of zot's event for a manifest put under a tag or
// digest; with the extension's typePrefix set, the type ends in ".image.updated".
const zotImageUpdated = "zotregistry.image.updated"

// cloudEvent is the part of a CloudEvent (v1.0) the handler reads.
type cloudEvent struct {
	ID     string
	Type   string
	Source string
	Data   []byte
}

// parseZot reads zot's events extension: a CloudEvent over HTTP, in binary
// content mode (ce-* headers, the data as the body, as zot's CloudEvents client
// sends it) or structured mode (application/cloudevents+json). An image.updated
// event is a push of data.name at data.reference (a tag or a digest), on the
// host of the source when that is an http(s) URL (zot's default source,
// "zotregistry.dev", names none); image.deleted, repository.created and
// image.lint_failed are not pushes.
func parseZot(h http.Header, body []byte) ([]item, error) {
	ce, err := readCloudEvent(h, body)
	if err != nil {
		return nil, err
	}
	switch {
	case ce.ID == "" || ce.Type == "":
		return nil, errors.New("a CloudEvent without id or type")
	case ce.Type != zotImageUpdated && !strings.HasSuffix(ce.Type, ".image.updated"):
		return []item{ignoredItem(ce.ID, "type %s", quote(ce.Type))}, nil
	}
	var d struct {
		Name      string `json:"name"`
		Reference string `json:"reference"`
		Digest    string `json:"digest"`
	}
	if err := decodeObject(ce.Data, &d); err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	if d.Name == "" {
		return nil, errors.New("no data.name")
	}
	it, err := pushItem(ce.ID, urlHost(ce.Source), d.Name, d.Reference, d.Digest)
	if err != nil {
		return nil, err
	}
	return []item{it}, nil
}

// readCloudEvent reads a CloudEvent in structured content mode (its media type
// application/cloudevents+json) or binary mode (ce-specversion and the other
// attributes as headers).
func readCloudEvent(h http.Header, body []byte) (cloudEvent, error) {
	if mt, _, err := mime.ParseMediaType(h.Get("Content-Type")); err == nil && mt == "application/cloudevents+json" {
		var s struct {
			SpecVersion string          `json:"specversion"`
			ID          string          `json:"id"`
			Type        string          `json:"type"`
			Source      string          `json:"source"`
			Data        json.RawMessage `json:"data"`
		}
		if err := decodeObject(body, &s); err != nil {
			return cloudEvent{}, err
		}
		if s.SpecVersion == "" {
			return cloudEvent{}, errors.New("a structured CloudEvent without specversion")
		}
		return cloudEvent{ID: s.ID, Type: s.Type, Source: s.Source, Data: s.Data}, nil
	}
	if h.Get("Ce-Specversion") == "" {
		return cloudEvent{}, errors.New("not a CloudEvent: no ce-specversion header, and not application/cloudevents+json")
	}
	return cloudEvent{ID: h.Get("Ce-Id"), Type: h.Get("Ce-Type"), Source: h.Get("Ce-Source"), Data: body}, nil
}

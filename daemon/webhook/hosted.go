package webhook

import (
	"errors"
	"fmt"
	"net/http"
)

// parseDockerHub reads Docker Hub's repository webhook, which fires on pushes
// only: push_data.tag of repository.repo_name on docker.io. The payload has no
// id; its push_data.pushed_at makes each push's body differ.
func parseDockerHub(_ http.Header, body []byte) ([]item, error) {
	var p struct {
		PushData *struct {
			Tag string `json:"tag"`
		} `json:"push_data"`
		Repository *struct {
			RepoName  string `json:"repo_name"`
			Namespace string `json:"namespace"`
			Name      string `json:"name"`
		} `json:"repository"`
	}
	if err := decodeObject(body, &p); err != nil {
		return nil, err
	}
	switch {
	case p.Repository == nil:
		return nil, errors.New("no repository")
	case p.PushData == nil:
		return nil, errors.New("no push_data")
	}
	repo := p.Repository.RepoName
	if repo == "" && p.Repository.Namespace != "" && p.Repository.Name != "" {
		repo = p.Repository.Namespace + "/" + p.Repository.Name
	}
	if repo == "" {
		return nil, errors.New("no repository.repo_name")
	}
	it, err := pushItem("", dockerHub, repo, p.PushData.Tag, "")
	if err != nil {
		return nil, err
	}
	return []item{it}, nil
}

// parseQuay reads Quay's repo_push notification: one push for each of
// updated_tags (one without a tag when the list is empty) on the host of
// docker_url. A notification without updated_tags (a build or vulnerability
// event) is not a push.
func parseQuay(_ http.Header, body []byte) ([]item, error) {
	var p struct {
		Repository  string    `json:"repository"`
		Namespace   string    `json:"namespace"`
		Name        string    `json:"name"`
		DockerURL   string    `json:"docker_url"`
		UpdatedTags *[]string `json:"updated_tags"`
	}
	if err := decodeObject(body, &p); err != nil {
		return nil, err
	}
	repo := p.Repository
	if repo == "" && p.Namespace != "" && p.Name != "" {
		repo = p.Namespace + "/" + p.Name
	}
	switch {
	case repo == "":
		return nil, errors.New("no repository")
	case p.UpdatedTags == nil:
		return []item{ignoredItem("", "a notification without updated_tags, not a repo_push")}, nil
	}
	var host string
	if p.DockerURL != "" {
		h, _, _, _, err := splitReference(p.DockerURL)
		if err != nil {
			return nil, fmt.Errorf("docker_url: %w", err)
		}
		host = h
	}
	tags := *p.UpdatedTags
	if len(tags) == 0 {
		tags = []string{""}
	}
	items := make([]item, 0, len(tags))
	for _, tag := range tags {
		it, err := pushItem("", host, repo, tag, "")
		if err != nil {
			return nil, err
		}
		items = append(items, it)
	}
	return items, nil
}

// harborData is the event data of Harbor's payloads, in both of its formats.
type harborData struct {
	Resources []struct {
		Digest      string `json:"digest"`
		Tag         string `json:"tag"` // the digest again for an untagged push
		ResourceURL string `json:"resource_url"`
	} `json:"resources"`
	Repository *struct {
		Name         string `json:"name"`
		Namespace    string `json:"namespace"`
		RepoFullName string `json:"repo_full_name"`
	} `json:"repository"`
}

// parseHarbor reads Harbor's webhook in its Default format (type PUSH_ARTIFACT,
// event_data) or its CloudEvents format (specversion, id, type
// harbor.artifact.pushed, data): one push for each resource, on the host of its
// resource_url. Pulls, deletes, scans and the rest are not pushes.
func parseHarbor(_ http.Header, body []byte) ([]item, error) {
	var p struct {
		Type        string      `json:"type"`
		SpecVersion string      `json:"specversion"`
		ID          string      `json:"id"`
		EventData   *harborData `json:"event_data"`
		Data        *harborData `json:"data"`
	}
	if err := decodeObject(body, &p); err != nil {
		return nil, err
	}
	data, id, field, isPush := p.EventData, "", "event_data", p.Type == "PUSH_ARTIFACT"
	if p.SpecVersion != "" {
		data, id, field, isPush = p.Data, p.ID, "data", p.Type == "harbor.artifact.pushed"
	}
	switch {
	case p.Type == "":
		return nil, errors.New("no type")
	case !isPush:
		return []item{ignoredItem(id, "type %s", quote(p.Type))}, nil
	case data == nil:
		return nil, errors.New("no " + field)
	}
	return harborItems(id, field, data)
}

func harborItems(id, field string, d *harborData) ([]item, error) {
	if d.Repository == nil {
		return nil, errors.New("no " + field + ".repository")
	}
	repo := d.Repository.RepoFullName
	if repo == "" && d.Repository.Namespace != "" && d.Repository.Name != "" {
		repo = d.Repository.Namespace + "/" + d.Repository.Name
	}
	if repo == "" {
		return nil, errors.New("no " + field + ".repository.repo_full_name")
	}
	if len(d.Resources) == 0 {
		return nil, errors.New("no " + field + ".resources")
	}
	items := make([]item, 0, len(d.Resources))
	for i, res := range d.Resources {
		var host string
		if res.ResourceURL != "" {
			h, _, _, _, err := splitReference(res.ResourceURL)
			if err != nil {
				return nil, fmt.Errorf("%s.resources[%d]: %w", field, i, err)
			}
			host = h
		}
		it, err := pushItem(id, host, repo, res.Tag, res.Digest)
		if err != nil {
			return nil, fmt.Errorf("%s.resources[%d]: %w", field, i, err)
		}
		items = append(items, it)
	}
	return items, nil
}

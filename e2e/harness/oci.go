package harness

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"
)

// A minimal OCI distribution client over plain HTTP, enough for the harness to check
// the registry it runs (push a small image, list tags page by page). Seeding the
// scenarios the plugin resolves is cmd/demo's job (Registry.Seed).

var httpClient = &http.Client{Timeout: 30 * time.Second}

// PushImage pushes a one-layer linux/amd64 image to repo:tag and returns the
// manifest digest. The image's content depends on repo and tag only.
func (r *Registry) PushImage(repo, tag string) (string, error) {
	layer := []byte("e2e layer for " + repo + ":" + tag)
	layerDigest, err := r.pushBlob(repo, layer)
	if err != nil {
		return "", err
	}
	config, _ := json.Marshal(map[string]any{
		"architecture": "amd64",
		"os":           "linux",
		"created":      "2024-01-01T00:00:00Z",
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{layerDigest}},
		"config":       map[string]any{},
	})
	configDigest, err := r.pushBlob(repo, config)
	if err != nil {
		return "", err
	}
	manifest, _ := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config": map[string]any{
			"mediaType": "application/vnd.oci.image.config.v1+json",
			"digest":    configDigest, "size": len(config),
		},
		"layers": []any{map[string]any{
			"mediaType": "application/vnd.oci.image.layer.v1.tar",
			"digest":    layerDigest, "size": len(layer),
		}},
	})
	req, err := http.NewRequest(http.MethodPut, r.url("/v2/%s/manifests/%s", repo, tag), bytes.NewReader(manifest))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
	resp, err := httpClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		body, _ := io.ReadAll(resp.Body)
		return "", fmt.Errorf("PUT manifest %s:%s: %s: %s", repo, tag, resp.Status, body)
	}
	return digestOf(manifest), nil
}

func (r *Registry) pushBlob(repo string, data []byte) (string, error) {
	digest := digestOf(data)
	resp, err := httpClient.Post(r.url("/v2/%s/blobs/uploads/", repo), "", nil)
	if err != nil {
		return "", err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return "", fmt.Errorf("POST blob upload for %s: %s", repo, resp.Status)
	}
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil {
		return "", err
	}
	if !loc.IsAbs() {
		loc = (&url.URL{Scheme: "http", Host: r.Host}).ResolveReference(loc)
	}
	q := loc.Query()
	q.Set("digest", digest)
	loc.RawQuery = q.Encode()
	req, err := http.NewRequest(http.MethodPut, loc.String(), bytes.NewReader(data))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err = httpClient.Do(req)
	if err != nil {
		return "", err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		return "", fmt.Errorf("PUT blob %s to %s: %s", digest, repo, resp.Status)
	}
	return digest, nil
}

// TagPages lists repo's tags the way go-containerregistry's remote.List does (asking
// n=1000 and following Link headers) and returns them page by page.
func (r *Registry) TagPages(repo string) ([][]string, error) {
	next := r.url("/v2/%s/tags/list?n=1000", repo)
	var pages [][]string
	for next != "" && len(pages) < 1000 {
		resp, err := httpClient.Get(next)
		if err != nil {
			return nil, err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("GET %s: %s: %s", next, resp.Status, body)
		}
		var page struct {
			Tags []string `json:"tags"`
		}
		if err := json.Unmarshal(body, &page); err != nil {
			return nil, err
		}
		pages = append(pages, page.Tags)
		next = ""
		if m := linkRE.FindStringSubmatch(resp.Header.Get("Link")); m != nil {
			u, err := url.Parse(m[1])
			if err != nil {
				return nil, err
			}
			next = (&url.URL{Scheme: "http", Host: r.Host}).ResolveReference(u).String()
		}
	}
	return pages, nil
}

// Tags lists all of repo's tags (following pagination).
func (r *Registry) Tags(repo string) ([]string, error) {
	pages, err := r.TagPages(repo)
	if err != nil {
		return nil, err
	}
	var all []string
	for _, p := range pages {
		all = append(all, p...)
	}
	return all, nil
}

var linkRE = regexp.MustCompile(`<([^>]+)>\s*;\s*rel="?next"?`)

func (r *Registry) url(format string, args ...any) string {
	return "http://" + r.Host + fmt.Sprintf(format, args...)
}

func digestOf(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Digest returns the digest repo:tag points at (the index digest for a multi-platform
// image), from the registry's Docker-Content-Digest header.
func (r *Registry) Digest(repo, tag string) (string, error) {
	req, err := http.NewRequest(http.MethodHead, r.url("/v2/%s/manifests/%s", repo, tag), nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Accept", strings.Join([]string{
		"application/vnd.oci.image.index.v1+json",
		"application/vnd.docker.distribution.manifest.list.v2+json",
		"application/vnd.oci.image.manifest.v1+json",
		"application/vnd.docker.distribution.manifest.v2+json",
	}, ", "))
	resp, err := httpClient.Do(req)
	if err != nil {
		return "", err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("HEAD %s:%s: %s", repo, tag, resp.Status)
	}
	d := resp.Header.Get("Docker-Content-Digest")
	if d == "" {
		return "", fmt.Errorf("HEAD %s:%s: no Docker-Content-Digest", repo, tag)
	}
	return d, nil
}

package registrytest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Describe reads what the registry holds for a repository's tags, as registries'
// own metadata APIs (Docker Hub's tags API, Harbor's artifacts, Artifact
// Registry's dockerImages, ECR's DescribeImages, ACR's manifests, Quay's tags)
// describe it: per tag its digest and push time, and per platform manifest its
// digest, platform and the config's created time. The vendor API servers of this
// package answer from it, so that they and the OCI protocol see the same
// contents. It reads the inner registry directly: no request is counted.

// TagDescription is one tag of a repository.
type TagDescription struct {
	Tag       string
	Digest    string // of the manifest or index the tag points at
	MediaType string
	Size      int64
	// Pushed is when the tag was pushed: the time Push, PushIndex or Tag was
	// called (or SetPushed), never before the newest Created of its manifests
	// (a registry does not receive an image before it is built).
	Pushed time.Time
	// Manifests are the tag's image manifests: an index's children (attestations
	// included, marked), or the image manifest itself.
	Manifests []ManifestDescription
	// Annotations are the annotations of the manifest or index the tag points at.
	Annotations map[string]string
}

// ManifestDescription is one image manifest of a tag.
type ManifestDescription struct {
	Digest, MediaType string
	Size              int64
	// Platform is the index entry's platform, else the config's os, architecture
	// and variant; nil when neither says.
	Platform     *v1.Platform
	ConfigDigest string
	Created      time.Time // the config's created (zero when absent)
	// Annotations are the image manifest's annotations.
	Annotations map[string]string
	// Attestation: an index entry of platform unknown/unknown (BuildKit's
	// attestation manifests).
	Attestation bool
}

// SetPushed sets the push time Describe reports for repo:tag.
func (s *Server) SetPushed(repo, tag string, at time.Time) {
	s.tagsMu.Lock()
	defer s.tagsMu.Unlock()
	if s.pushed == nil {
		s.pushed = map[string]time.Time{}
	}
	s.pushed[repo+":"+tag] = at
	s.pushVersion.Add(1)
}

// notePushed records now as repo:tag's push time, unless one was set already.
func (s *Server) notePushed(repo, tag string) {
	s.tagsMu.Lock()
	defer s.tagsMu.Unlock()
	if s.pushed == nil {
		s.pushed = map[string]time.Time{}
	}
	s.pushed[repo+":"+tag] = time.Now()
	s.pushVersion.Add(1)
}

func (s *Server) pushedOf(repo, tag string) time.Time {
	s.tagsMu.Lock()
	defer s.tagsMu.Unlock()
	return s.pushed[repo+":"+tag]
}

// describedRepo is a repository's Describe answer as of a count of writes and
// of push-time changes.
type describedRepo struct {
	writes, pushes uint64
	tags           []TagDescription
}

// Describe returns every tag of repo, sorted by tag. The answer is kept until
// the registry or a push time changes (vendor API servers ask for it at every
// page). The slice is the caller's; what its elements hold is shared.
func (s *Server) Describe(repo string) ([]TagDescription, error) {
	writes, pushes := s.writes.Load(), s.pushVersion.Load()
	s.tagsMu.Lock()
	c, ok := s.described[repo]
	s.tagsMu.Unlock()
	if ok && c.writes == writes && c.pushes == pushes && writes%2 == 0 {
		return slices.Clone(c.tags), nil
	}
	tags, err := s.describe(repo)
	if err != nil {
		return nil, err
	}
	s.tagsMu.Lock()
	if s.described == nil {
		s.described = map[string]describedRepo{}
	}
	s.described[repo] = describedRepo{writes: writes, pushes: pushes, tags: tags}
	s.tagsMu.Unlock()
	return slices.Clone(tags), nil
}

func (s *Server) describe(repo string) ([]TagDescription, error) {
	rec, err := s.innerDo(http.MethodGet, "/v2/"+repo+"/tags/list", nil, nil)
	if err != nil {
		return nil, err
	}
	if rec.Code != http.StatusOK {
		return nil, fmt.Errorf("registrytest: describe %s: tags: status %d", repo, rec.Code)
	}
	var list struct {
		Tags []string `json:"tags"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &list); err != nil {
		return nil, err
	}
	slices.Sort(list.Tags)
	d := describer{s: s, repo: repo, manifests: map[string]ManifestDescription{}}
	out := make([]TagDescription, 0, len(list.Tags))
	for _, tag := range list.Tags {
		td, err := d.tag(tag)
		if err != nil {
			return nil, err
		}
		out = append(out, td)
	}
	return out, nil
}

// describer reads one repository, each manifest once.
type describer struct {
	s         *Server
	repo      string
	manifests map[string]ManifestDescription // by digest
}

func (d *describer) tag(tag string) (TagDescription, error) {
	body, mt, err := d.s.manifest(d.repo, tag)
	if err != nil {
		return TagDescription{}, err
	}
	h, size, err := v1.SHA256(strings.NewReader(string(body)))
	if err != nil {
		return TagDescription{}, err
	}
	td := TagDescription{Tag: tag, Digest: h.String(), MediaType: mt, Size: size, Pushed: d.s.pushedOf(d.repo, tag)}
	if types.MediaType(mt).IsIndex() {
		idx, err := v1.ParseIndexManifest(strings.NewReader(string(body)))
		if err != nil {
			return TagDescription{}, err
		}
		td.Annotations = idx.Annotations
		for _, m := range idx.Manifests {
			md, err := d.image(m.Digest.String(), string(m.MediaType), m.Size, m.Platform)
			if err != nil {
				return TagDescription{}, err
			}
			td.Manifests = append(td.Manifests, md)
		}
	} else {
		md, err := d.image(h.String(), mt, size, nil)
		if err != nil {
			return TagDescription{}, err
		}
		td.Manifests = append(td.Manifests, md)
		td.Annotations = md.Annotations
	}
	for _, m := range td.Manifests {
		if m.Created.After(td.Pushed) {
			td.Pushed = m.Created
		}
	}
	return td, nil
}

// image describes one image manifest; p is its index entry's platform (nil for
// a tag's own image manifest).
func (d *describer) image(digest, mt string, size int64, p *v1.Platform) (ManifestDescription, error) {
	if md, ok := d.manifests[digest]; ok {
		return md, nil
	}
	body, _, err := d.s.manifest(d.repo, digest)
	if err != nil {
		return ManifestDescription{}, err
	}
	m, err := v1.ParseManifest(strings.NewReader(string(body)))
	if err != nil {
		return ManifestDescription{}, fmt.Errorf("registrytest: describe %s@%s: %w", d.repo, digest, err)
	}
	md := ManifestDescription{Digest: digest, MediaType: mt, Size: size, Platform: p, ConfigDigest: m.Config.Digest.String(), Annotations: m.Annotations,
		Attestation: p != nil && p.OS == "unknown" && p.Architecture == "unknown"}
	rec, err := d.s.innerDo(http.MethodGet, "/v2/"+d.repo+"/blobs/"+m.Config.Digest.String(), nil, nil)
	if err != nil {
		return ManifestDescription{}, err
	}
	if rec.Code == http.StatusOK {
		var cfg v1.ConfigFile
		if json.Unmarshal(rec.Body.Bytes(), &cfg) == nil {
			md.Created = cfg.Created.Time
			if md.Platform == nil && cfg.OS != "" {
				md.Platform = &v1.Platform{OS: cfg.OS, Architecture: cfg.Architecture, Variant: cfg.Variant}
			}
		}
	}
	d.manifests[digest] = md
	return md, nil
}

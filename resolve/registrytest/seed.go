package registrytest

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Seeding writes straight to the inner registry handler: no HTTP, no
// middleware, no auth, no faults, no counters.

func (s *Server) seedOptions(ctx context.Context) []remote.Option {
	return []remote.Option{remote.WithTransport(s.seed), remote.WithContext(ctx)}
}

func (s *Server) tagRef(repo, tag string) (name.Tag, error) {
	t, err := name.NewTag(s.Host+"/"+repo+":"+tag, name.StrictValidation)
	if err != nil {
		return name.Tag{}, fmt.Errorf("registrytest: repository %q tag %q: %w", repo, tag, err)
	}
	return t, nil
}

// Push stores img under repo:tag.
func (s *Server) Push(t testing.TB, repo, tag string, img v1.Image) {
	t.Helper()
	if err := s.PushE(repo, tag, img); err != nil {
		t.Fatal(err)
	}
}

// PushE is Push returning an error.
func (s *Server) PushE(repo, tag string, img v1.Image) error {
	ref, err := s.tagRef(repo, tag)
	if err != nil {
		return err
	}
	if err := remote.Write(ref, img, s.seedOptions(context.Background())...); err != nil {
		return fmt.Errorf("registrytest: push %s: %w", ref, err)
	}
	s.notePushed(repo, tag)
	return nil
}

// PushIndex stores idx (and every manifest it names) under repo:tag.
func (s *Server) PushIndex(t testing.TB, repo, tag string, idx v1.ImageIndex) {
	t.Helper()
	if err := s.PushIndexE(repo, tag, idx); err != nil {
		t.Fatal(err)
	}
}

// PushIndexE is PushIndex returning an error.
func (s *Server) PushIndexE(repo, tag string, idx v1.ImageIndex) error {
	ref, err := s.tagRef(repo, tag)
	if err != nil {
		return err
	}
	if err := remote.WriteIndex(ref, idx, s.seedOptions(context.Background())...); err != nil {
		return fmt.Errorf("registrytest: push index %s: %w", ref, err)
	}
	s.notePushed(repo, tag)
	return nil
}

// Tag points repo:tag at content already in repo; digest is a digest
// ("sha256:...") or an existing tag. It only copies manifest bytes, so
// thousands of tags seed in milliseconds.
func (s *Server) Tag(t testing.TB, repo, tag, digest string) {
	t.Helper()
	if err := s.TagE(repo, tag, digest); err != nil {
		t.Fatal(err)
	}
}

// TagE is Tag returning an error.
func (s *Server) TagE(repo, tag, digest string) error {
	if _, err := s.tagRef(repo, tag); err != nil {
		return err
	}
	body, mt, err := s.manifest(repo, digest)
	if err != nil {
		return err
	}
	h := http.Header{"Content-Type": {mt}}
	rec, err := s.innerDo(http.MethodPut, "/v2/"+repo+"/manifests/"+tag, h, body)
	if err != nil {
		return err
	}
	if rec.Code != http.StatusCreated {
		return fmt.Errorf("registrytest: tag %s/%s:%s: status %d: %s", s.Host, repo, tag, rec.Code, strings.TrimSpace(rec.Body.String()))
	}
	s.notePushed(repo, tag)
	return nil
}

// Untag removes repo:tag (the content stays reachable by digest).
func (s *Server) Untag(t testing.TB, repo, tag string) {
	t.Helper()
	if err := s.UntagE(repo, tag); err != nil {
		t.Fatal(err)
	}
}

// UntagE is Untag returning an error.
func (s *Server) UntagE(repo, tag string) error {
	if _, err := s.tagRef(repo, tag); err != nil {
		return err
	}
	rec, err := s.innerDo(http.MethodDelete, "/v2/"+repo+"/manifests/"+tag, nil, nil)
	if err != nil {
		return err
	}
	if rec.Code != http.StatusAccepted {
		return fmt.Errorf("registrytest: untag %s/%s:%s: status %d: %s", s.Host, repo, tag, rec.Code, strings.TrimSpace(rec.Body.String()))
	}
	return nil
}

// Digest returns the digest repo:ref points at (ref: a tag or a digest).
func (s *Server) Digest(t testing.TB, repo, ref string) string {
	t.Helper()
	d, err := s.DigestE(repo, ref)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// DigestE is Digest returning an error.
func (s *Server) DigestE(repo, ref string) (string, error) {
	body, _, err := s.manifest(repo, ref)
	if err != nil {
		return "", err
	}
	h, _, err := v1.SHA256(strings.NewReader(string(body)))
	if err != nil {
		return "", err
	}
	return h.String(), nil
}

// manifest reads a manifest straight from the inner registry.
func (s *Server) manifest(repo, ref string) ([]byte, string, error) {
	rec, err := s.innerDo(http.MethodGet, "/v2/"+repo+"/manifests/"+ref, nil, nil)
	if err != nil {
		return nil, "", err
	}
	if rec.Code != http.StatusOK {
		return nil, "", fmt.Errorf("registrytest: %s/%s %s: status %d: %s", s.Host, repo, ref, rec.Code, strings.TrimSpace(rec.Body.String()))
	}
	return rec.Body.Bytes(), rec.Header().Get("Content-Type"), nil
}

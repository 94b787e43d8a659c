package registrytest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"gopkg.in/yaml.v3"
)

// Scenario describes a registry's content (testdata/registry/*.yaml):
//
//	repositories:
//	  team/web:
//	    tags:
//	      - {tag: "1.2.0", created: "2026-01-01T00:00:00Z", platforms: [linux/amd64, linux/arm64]}
//	      - {tag: "1.3.0", created: "2026-02-01T00:00:00Z", platforms: [linux/arm64], attestation: true}
//	      - {tag: "latest", sameAs: "1.3.0"}
//	    generate: {count: 1000, format: "1.0.%d", created: "2026-01-01T00:00:00Z", platforms: [linux/amd64]}
//
// Content is deterministic: the same scenario gives the same digests.
type Scenario struct {
	Repositories map[string]*Repository `yaml:"repositories"`
}

// Repository is the content of one repository.
type Repository struct {
	Tags     []TagSpec `yaml:"tags"`
	Generate *Generate `yaml:"generate"`
}

// TagSpec is one tag: either content (created + platforms) or sameAs.
//
// One platform without attestation or index gives a plain image manifest;
// otherwise an image index with one image per platform.
type TagSpec struct {
	Tag       string   `yaml:"tag"`
	Created   string   `yaml:"created"`   // RFC 3339; the image config's created
	Platforms []string `yaml:"platforms"` // os/arch[/variant]
	// Attestation adds buildx-style unknown/unknown attestation manifests.
	Attestation bool `yaml:"attestation"`
	// Index forces an image index even for one platform.
	Index bool `yaml:"index"`
	// CreatedAnnotation sets org.opencontainers.image.created on the top manifest.
	CreatedAnnotation bool `yaml:"createdAnnotation"`
	// Docker uses Docker schema 2 media types instead of OCI.
	Docker bool `yaml:"docker"`
	// SameAs points this tag at another tag's content (explicit or generated).
	SameAs string `yaml:"sameAs"`
}

// Generate adds Count tags named fmt.Sprintf(Format, i) for i from Start.
// Tag i is created at Created + (i-Start)*Interval.
type Generate struct {
	Count             int      `yaml:"count"`
	Format            string   `yaml:"format"`
	Start             int      `yaml:"start"`
	Created           string   `yaml:"created"`
	Interval          string   `yaml:"interval"` // Go duration, e.g. "24h"; default 0
	Platforms         []string `yaml:"platforms"`
	Attestation       bool     `yaml:"attestation"`
	Index             bool     `yaml:"index"`
	CreatedAnnotation bool     `yaml:"createdAnnotation"`
	Docker            bool     `yaml:"docker"`
}

// LoadScenario reads and validates a scenario file. Unknown keys are errors
// naming the key and line.
func LoadScenario(path string) (*Scenario, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("scenario: %w", err)
	}
	sc, err := ParseScenario(b)
	if err != nil {
		return nil, fmt.Errorf("scenario %s: %w", path, err)
	}
	return sc, nil
}

// ParseScenario parses and validates scenario YAML strictly.
func ParseScenario(b []byte) (*Scenario, error) {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var sc Scenario
	if err := dec.Decode(&sc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("empty scenario")
		}
		return nil, friendlyYAMLError(err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("more than one YAML document")
	}
	if err := sc.Validate(); err != nil {
		return nil, err
	}
	return &sc, nil
}

var unknownField = regexp.MustCompile(`^line (\d+): field (.+) not found in type registrytest\.(\w+)$`)

// friendlyYAMLError rewrites yaml.v3's unknown-field errors to name the key,
// where it was found and the keys accepted there.
func friendlyYAMLError(err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err
	}
	types := map[string]reflect.Type{
		"Scenario":   reflect.TypeOf(Scenario{}),
		"Repository": reflect.TypeOf(Repository{}),
		"TagSpec":    reflect.TypeOf(TagSpec{}),
		"Generate":   reflect.TypeOf(Generate{}),
	}
	where := map[string]string{
		"Scenario":   "at the top level",
		"Repository": "in a repository",
		"TagSpec":    "in a tags entry",
		"Generate":   "in generate",
	}
	msgs := make([]string, 0, len(te.Errors))
	for _, e := range te.Errors {
		m := unknownField.FindStringSubmatch(e)
		if m == nil || types[m[3]] == nil {
			msgs = append(msgs, e)
			continue
		}
		var keys []string
		t := types[m[3]]
		for i := 0; i < t.NumField(); i++ {
			if k, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ","); k != "" && k != "-" {
				keys = append(keys, k)
			}
		}
		msgs = append(msgs, fmt.Sprintf("line %s: unknown key %q %s (accepted: %s)", m[1], m[2], where[m[3]], strings.Join(keys, ", ")))
	}
	return errors.New(strings.Join(msgs, "; "))
}

// Validate checks every field and returns the first error, naming the
// repository, the tag and the field.
func (sc *Scenario) Validate() error {
	_, err := sc.plan()
	return err
}

// SeedRemote pushes sc to any registry over HTTP with go-containerregistry's
// remote package (so it also works against the distribution registry).
// registryHost is "host:port", optionally prefixed with "http://" (plain
// HTTP, e.g. Server.URL) or "https://"; without a scheme ggcr's default
// applies (HTTP for localhost and loopback, HTTPS otherwise). opts are added
// to remote's (auth, transport, ...); the context is ctx.
func SeedRemote(ctx context.Context, registryHost string, sc *Scenario, opts ...remote.Option) error {
	var nameOpts []name.Option
	switch {
	case strings.HasPrefix(registryHost, "http://"):
		registryHost = strings.TrimPrefix(registryHost, "http://")
		nameOpts = append(nameOpts, name.Insecure)
	case strings.HasPrefix(registryHost, "https://"):
		registryHost = strings.TrimPrefix(registryHost, "https://")
	}
	registryHost = strings.TrimSuffix(registryHost, "/")
	ropts := append([]remote.Option{remote.WithJobs(8)}, opts...)
	ropts = append(ropts, remote.WithContext(ctx))
	return seed(registryHost, sc, nameOpts, ropts)
}

// SeedScenario writes sc straight into the server, bypassing the middleware
// and the counters.
func (s *Server) SeedScenario(sc *Scenario) error {
	return seed(s.Host, sc, nil, append([]remote.Option{remote.WithJobs(4)}, s.seedOptions(context.Background())...))
}

// SeedSharedRepositories seeds the repositories many apps share in the
// benchmarks: 20 of them, org/svc-00 to org/svc-19, each with 100 multi-arch
// tags 1.0.0 to 1.0.99 (indexes for linux/amd64 and linux/arm64, created an
// hour apart from 2026-01-01, the build time in the child configs). It returns
// their names, in order.
func (s *Server) SeedSharedRepositories(t testing.TB) []string {
	t.Helper()
	sc := &Scenario{Repositories: map[string]*Repository{}}
	var names []string
	for r := range 20 {
		repo := fmt.Sprintf("org/svc-%02d", r)
		names = append(names, repo)
		sc.Repositories[repo] = &Repository{Generate: &Generate{Count: 100, Format: "1.0.%d",
			Created: "2026-01-01T00:00:00Z", Interval: "1h", Platforms: []string{"linux/amd64", "linux/arm64"}}}
	}
	if err := s.SeedScenario(sc); err != nil {
		t.Fatal(err)
	}
	return names
}

func seed(host string, sc *Scenario, nameOpts []name.Option, ropts []remote.Option) error {
	plan, err := sc.plan()
	if err != nil {
		return fmt.Errorf("scenario: %w", err)
	}
	nameOpts = append(nameOpts, name.StrictValidation)

	// Build every piece of content, then write it all at once: MultiWrite
	// dedups shared blobs and uploads in parallel.
	todo := map[name.Reference]remote.Taggable{}
	built := map[string]remote.Taggable{} // repo + "\x00" + tag
	cache := &layerCache{}
	for _, r := range plan {
		for _, t := range r.tags {
			if t.sameAs != "" {
				continue
			}
			ref, err := name.NewTag(host+"/"+r.name+":"+t.tag, nameOpts...)
			if err != nil {
				return fmt.Errorf("scenario: %s:%s: %w", r.name, t.tag, err)
			}
			tg, err := t.spec.taggable(cache)
			if err != nil {
				return fmt.Errorf("scenario: %s:%s: %w", r.name, t.tag, err)
			}
			todo[ref] = tg
			built[r.name+"\x00"+t.tag] = tg
		}
	}
	if err := remote.MultiWrite(todo, ropts...); err != nil {
		return fmt.Errorf("scenario: push: %w", err)
	}
	// Aliases: only a manifest PUT, the content is there.
	for _, r := range plan {
		for _, t := range r.tags {
			if t.sameAs == "" {
				continue
			}
			ref, err := name.NewTag(host+"/"+r.name+":"+t.tag, nameOpts...)
			if err != nil {
				return fmt.Errorf("scenario: %s:%s: %w", r.name, t.tag, err)
			}
			if err := remote.Put(ref, built[r.name+"\x00"+t.sameAs], ropts...); err != nil {
				return fmt.Errorf("scenario: tag %s:%s as %s: %w", r.name, t.tag, t.sameAs, err)
			}
		}
	}
	return nil
}

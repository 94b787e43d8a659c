package registrytest

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Planning a Scenario: checking it and turning it into the images each tag
// names, before anything is pushed.

// plannedTag is one tag to write: content to push, or a tag of other content.
type plannedTag struct {
	tag    string
	spec   content
	sameAs string // resolved to a content tag
}

type content struct {
	seed              string
	labels            map[string]string
	created           time.Time
	platforms         []string
	attestation       bool
	index             bool
	createdAnnotation bool
	docker            bool
}

type plannedRepo struct {
	name string
	tags []plannedTag // content first, then sameAs
}

// withLayerCache shares gzipped layer bytes between images built with it.
func withLayerCache(c *layerCache) ContentOption {
	return ContentOption{img: func(s *imageSpec) { s.layers = c }}
}

func (c content) taggable(cache *layerCache) (remote.Taggable, error) {
	if len(c.platforms) == 1 && !c.index && !c.attestation {
		opts := []ImageOption{WithSeed(c.seed), WithLabels(c.labels), withLayerCache(cache)}
		if c.docker {
			opts = append(opts, WithDockerMediaTypes())
		}
		if c.createdAnnotation {
			opts = append(opts, WithCreatedAnnotation())
		}
		return NewImage(c.created, c.platforms[0], opts...)
	}
	opts := []IndexOption{WithSeed(c.seed), WithLabels(c.labels), withLayerCache(cache)}
	if c.docker {
		opts = append(opts, WithDockerMediaTypes())
	}
	if c.createdAnnotation {
		opts = append(opts, WithCreatedAnnotation())
	}
	if c.attestation {
		opts = append(opts, WithAttestation())
	}
	return NewIndex(c.created, c.platforms, opts...)
}

func checkPlatforms(ps []string) error {
	if len(ps) == 0 {
		return errors.New("platforms: at least one os/arch[/variant] is required")
	}
	seen := map[string]bool{}
	for _, p := range ps {
		if _, err := ParsePlatform(p); err != nil {
			return fmt.Errorf("platforms: %w", err)
		}
		if seen[p] {
			return fmt.Errorf("platforms: %q listed twice", p)
		}
		seen[p] = true
	}
	return nil
}

func parseCreated(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, errors.New("created: required (RFC 3339, e.g. 2026-01-01T00:00:00Z)")
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("created %q: want RFC 3339, e.g. 2026-01-01T00:00:00Z", s)
	}
	return t.UTC(), nil
}

func (sc *Scenario) plan() ([]plannedRepo, error) {
	if sc == nil || len(sc.Repositories) == 0 {
		return nil, errors.New("repositories: at least one repository is required")
	}
	names := make([]string, 0, len(sc.Repositories))
	for n := range sc.Repositories {
		names = append(names, n)
	}
	sort.Strings(names)

	var out []plannedRepo
	for _, repo := range names {
		pr, err := planRepo(repo, sc.Repositories[repo])
		if err != nil {
			return nil, err
		}
		out = append(out, pr)
	}
	return out, nil
}

// planRepo validates one repository and plans its tags: generated ones, then
// the listed ones with content, then the sameAs ones resolved to a content tag.
func planRepo(repo string, r *Repository) (plannedRepo, error) {
	where := fmt.Sprintf("repositories[%q]", repo)
	if _, err := name.NewRepository("registry.test/"+repo, name.StrictValidation); err != nil {
		return plannedRepo{}, fmt.Errorf("%s: bad repository name: %w", where, err)
	}
	if r == nil || (len(r.Tags) == 0 && r.Generate == nil) {
		return plannedRepo{}, fmt.Errorf("%s: needs tags or generate", where)
	}
	pr := plannedRepo{name: repo}
	defined := tagSet{}
	if g := r.Generate; g != nil {
		tags, err := planGenerated(repo, where+".generate", g, defined)
		if err != nil {
			return plannedRepo{}, err
		}
		pr.tags = append(pr.tags, tags...)
	}
	tags, aliases, err := planListed(repo, where, r.Tags, defined)
	if err != nil {
		return plannedRepo{}, err
	}
	pr.tags = append(pr.tags, tags...)
	resolved, err := resolveAliases(where, aliases, defined)
	if err != nil {
		return plannedRepo{}, err
	}
	pr.tags = append(pr.tags, resolved...)
	return pr, nil
}

// tagSet is the tags defined so far in one repository.
type tagSet map[string]bool

// define checks tag (found at where) is a valid tag not yet defined, and
// records it.
func (defined tagSet) define(where, tag string) error {
	if tag == "" {
		return fmt.Errorf("%s: tag: required", where)
	}
	if _, err := name.NewTag("registry.test/x:"+tag, name.StrictValidation); err != nil {
		return fmt.Errorf("%s: tag %q: not a valid tag ([A-Za-z0-9_][A-Za-z0-9_.-]{0,127})", where, tag)
	}
	if defined[tag] {
		return fmt.Errorf("%s: tag %q defined twice", where, tag)
	}
	defined[tag] = true
	return nil
}

// planGenerated validates g (found at gw) and plans its tags.
func planGenerated(repo, gw string, g *Generate, defined tagSet) ([]plannedTag, error) {
	if g.Count <= 0 {
		return nil, fmt.Errorf("%s: count %d: must be > 0", gw, g.Count)
	}
	if strings.Count(g.Format, "%") != 1 || !strings.Contains(g.Format, "%d") {
		return nil, fmt.Errorf("%s: format %q: must contain exactly one %%d", gw, g.Format)
	}
	created, err := parseCreated(g.Created)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", gw, err)
	}
	var step time.Duration
	if g.Interval != "" {
		if step, err = time.ParseDuration(g.Interval); err != nil || step < 0 {
			return nil, fmt.Errorf("%s: interval %q: want a non-negative Go duration, e.g. 1h or 24h", gw, g.Interval)
		}
	}
	if err := checkPlatforms(g.Platforms); err != nil {
		return nil, fmt.Errorf("%s: %w", gw, err)
	}
	var tags []plannedTag
	for i := 0; i < g.Count; i++ {
		tag := fmt.Sprintf(g.Format, g.Start+i)
		if err := defined.define(gw, tag); err != nil {
			return nil, err
		}
		tags = append(tags, plannedTag{tag: tag, spec: content{
			// Generated tags share one layer; the version label
			// keeps every digest distinct.
			seed:              repo + "@generate",
			labels:            map[string]string{LabelVersion: tag},
			created:           created.Add(time.Duration(i) * step),
			platforms:         g.Platforms,
			attestation:       g.Attestation,
			index:             g.Index,
			createdAnnotation: g.CreatedAnnotation,
			docker:            g.Docker,
		}})
	}
	return tags, nil
}

// planListed validates the listed tags of the repository at where and plans
// those with content; those with sameAs it returns apart, unresolved.
func planListed(repo, where string, list []TagSpec, defined tagSet) (tags, aliases []plannedTag, err error) {
	for i, t := range list {
		tw := fmt.Sprintf("%s.tags[%d]", where, i)
		if t.Tag != "" {
			tw += fmt.Sprintf(" (tag %q)", t.Tag)
		}
		if err := defined.define(tw, t.Tag); err != nil {
			return nil, nil, err
		}
		if t.SameAs != "" {
			if t.Created != "" || len(t.Platforms) > 0 || t.Attestation || t.Index || t.CreatedAnnotation || t.Docker {
				return nil, nil, fmt.Errorf("%s: sameAs %q cannot be combined with created, platforms, attestation, index, createdAnnotation or docker", tw, t.SameAs)
			}
			aliases = append(aliases, plannedTag{tag: t.Tag, sameAs: t.SameAs})
			continue
		}
		created, err := parseCreated(t.Created)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", tw, err)
		}
		if err := checkPlatforms(t.Platforms); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", tw, err)
		}
		tags = append(tags, plannedTag{tag: t.Tag, spec: content{
			seed:              repo + ":" + t.Tag,
			labels:            map[string]string{LabelVersion: t.Tag},
			created:           created,
			platforms:         t.Platforms,
			attestation:       t.Attestation,
			index:             t.Index,
			createdAnnotation: t.CreatedAnnotation,
			docker:            t.Docker,
		}})
	}
	return tags, aliases, nil
}

// resolveAliases resolves sameAs chains to a content tag.
func resolveAliases(where string, aliases []plannedTag, defined tagSet) ([]plannedTag, error) {
	target := map[string]string{}
	for _, a := range aliases {
		target[a.tag] = a.sameAs
	}
	var out []plannedTag
	for _, a := range aliases {
		to, hops := a.sameAs, 0
		for {
			next, isAlias := target[to]
			if !isAlias {
				break
			}
			if hops++; hops > len(aliases) {
				return nil, fmt.Errorf("%s: tag %q: sameAs loop", where, a.tag)
			}
			to = next
		}
		if !defined[to] {
			return nil, fmt.Errorf("%s: tag %q: sameAs %q: no such tag in this repository", where, a.tag, a.sameAs)
		}
		out = append(out, plannedTag{tag: a.tag, sameAs: to})
	}
	return out, nil
}

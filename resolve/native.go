package resolve

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
)

// The native path: a resolution that lists its tags through the registry's own
// metadata API (metadata.go). What the API says replaces OCI requests (a tag
// lacking a required platform is skipped unread; a digest comes from the list);
// what it does not say is read through the OCI protocol, so the answer is the
// tag the OCI walk picks. newest-build reads the build times of the candidates
// newest-pushed first and stops at the first one pushed before the best build
// time found (a build is never later than its push, clock skew allowed).

// WithMetadataAPIs makes resolutions of the repositories for which f returns an
// API list their tags through it. onFallback, when set, is told when an API
// could not answer and the OCI protocol was used instead (a metric).
func WithMetadataAPIs(f MetadataAPIFor, onFallback func(api string, err error)) ResolverOption {
	return func(r *Resolver) { r.metadataFor, r.onMetadataFallback = f, onFallback }
}

// WithClockSkew sets how much later than its push time a build time may be
// (default DefaultClockSkew).
func WithClockSkew(d time.Duration) ResolverOption {
	return func(r *Resolver) {
		if d >= 0 {
			r.clockSkew = d
		}
	}
}

// metadataAPI is the API a resolution of repo with p lists its tags through, or
// nil. The digest strategy follows one tag: it lists nothing.
func (r *Resolver) metadataAPI(repo name.Repository, p *Policy) MetadataAPI {
	if r.metadataFor == nil || p.strategy == Digest {
		return nil
	}
	return r.metadataFor(repo)
}

// listNative lists repo's tags through api and stores what it says of each in
// in. ok is false when the API could not answer: the caller uses the OCI
// protocol, and res says why.
func (r *Resolver) listNative(ctx context.Context, api MetadataAPI, repo name.Repository, in *inspector, res *Result) (records map[string]*TagRecord, tags []string, ok bool) {
	recs, err := api.ListTagRecords(ctx, repo)
	if errors.Is(err, ErrMetadataPaused) {
		res.MetadataFallback = api.Name() + ": " + err.Error()
		return nil, nil, false
	}
	if err != nil {
		if ctx.Err() == nil {
			res.MetadataFallback = api.Name() + ": " + errorLine(err)
			if r.onMetadataFallback != nil {
				r.onMetadataFallback(api.Name(), err)
			}
		}
		return nil, nil, false
	}
	res.MetadataAPI = api.Name()
	records = make(map[string]*TagRecord, len(recs))
	tags = make([]string, 0, len(recs))
	for i := range recs {
		rec := &recs[i]
		if _, dup := records[rec.Tag]; dup {
			continue
		}
		records[rec.Tag] = rec
		tags = append(tags, rec.Tag)
		if rec.Platforms != nil && rec.Digest.Hex != "" {
			info := &TagInfo{Digest: rec.Digest, MediaType: rec.MediaType, Platforms: SortPlatforms(slices.Clone(rec.Platforms)),
				Created: rec.Created, listed: true}
			in.put(rec.Tag, info, !rec.Created.IsZero())
		}
	}
	slices.Sort(tags)
	return records, tags, true
}

// errorLine is err's message on one line, bounded.
func errorLine(err error) string {
	msg := strings.Join(strings.Fields(err.Error()), " ")
	if len(msg) > 300 {
		msg = msg[:300] + "..."
	}
	return msg
}

// nativeNewest orders allowed for newest-build from the records: the best
// candidate that has every required platform, preceded by every better tag
// that lacks one (the walk skips them, as it does on the OCI path). It reads
// the build time only of candidates that can still win, newest-pushed first.
// ok is false when no candidate has the platforms: the caller then orders every
// candidate as the OCI path does, so that the error lists the same tags.
func (r *Resolver) nativeNewest(ctx context.Context, api MetadataAPI, repo name.Repository, p *Policy, in *inspector, records map[string]*TagRecord, allowed []string, res *Result) (ordered []string, ok bool, err error) {
	byPush := slices.Clone(allowed)
	slices.SortFunc(byPush, func(a, b string) int { return pushedOrder(records[a], records[b]) })
	var best *TagInfo
	var bestTag string
	var lacking []string
	for _, t := range byPush {
		if best != nil && r.pushedBefore(records[t], best.Created) {
			break // it and every tag after it were built before the best
		}
		info, err := r.nativeInfo(ctx, api, repo, p, in, records, t, res)
		if err != nil {
			return nil, false, err
		}
		switch {
		case info == nil:
			lacking = append(lacking, t) // platforms known to lack one; build time not read yet
		case len(missingPlatforms(info.Platforms, p.platforms)) > 0:
			lacking = append(lacking, t)
		case info.Created.IsZero():
			res.Rejected = append(res.Rejected, Rejection{Tag: t, Reason: "no build time in its config or annotations"})
		case best == nil || newerBuild(info, t, best, bestTag):
			best, bestTag = info, t
		}
	}
	if best == nil {
		return nil, false, nil
	}
	better, err := r.betterLacking(ctx, api, repo, p, in, records, lacking, best, bestTag, res)
	if err != nil {
		return nil, false, err
	}
	return append(better, bestTag), true, nil
}

// betterLacking are the tags lacking a required platform whose build is newer
// than the winner's, best first: the OCI walk passes over each of them (and
// lists it as skipped). A tag pushed before the winner was built is not one;
// the build time of the others is read.
func (r *Resolver) betterLacking(ctx context.Context, api MetadataAPI, repo name.Repository, p *Policy, in *inspector, records map[string]*TagRecord, lacking []string, best *TagInfo, bestTag string, res *Result) ([]string, error) {
	var better []string
	for _, t := range lacking {
		if r.pushedBefore(records[t], best.Created) {
			continue
		}
		info := in.info(t)
		if info == nil || info.Created.IsZero() {
			read, err := r.readBuildTime(ctx, api, repo, p, in, records, t, res)
			if err != nil {
				return nil, err
			}
			info = read
		}
		if !info.Created.IsZero() && newerBuild(info, t, best, bestTag) {
			better = append(better, t)
		}
	}
	slices.SortFunc(better, func(a, b string) int {
		if c := in.info(b).Created.Compare(in.info(a).Created); c != 0 {
			return c
		}
		return cmp.Compare(b, a)
	})
	return better, nil
}

// nativeInfo is what is known of candidate t with its build time, reading it
// when the API did not give it; nil when the API says t lacks a required
// platform (nothing read).
func (r *Resolver) nativeInfo(ctx context.Context, api MetadataAPI, repo name.Repository, p *Policy, in *inspector, records map[string]*TagRecord, t string, res *Result) (*TagInfo, error) {
	info := in.info(t)
	if info != nil && len(missingPlatforms(info.Platforms, p.platforms)) > 0 && info.Created.IsZero() {
		return nil, nil
	}
	if info != nil && !info.Created.IsZero() {
		return info, nil
	}
	return r.readBuildTime(ctx, api, repo, p, in, records, t, res)
}

// readBuildTime reads t's build time: from the API when it gives one exactly
// (BuildTimer), else through the OCI protocol (its manifest and config).
func (r *Resolver) readBuildTime(ctx context.Context, api MetadataAPI, repo name.Repository, p *Policy, in *inspector, records map[string]*TagRecord, t string, res *Result) (*TagInfo, error) {
	if bt, ok := api.(BuildTimer); ok && in.info(t) != nil && records[t] != nil {
		created, known, err := bt.BuildTime(ctx, repo, *records[t], p.platforms)
		if err != nil {
			return nil, err
		}
		if known {
			withTime := *in.info(t)
			withTime.Created = created
			res.BuildTimeReads++
			in.put(t, &withTime, true)
			return &withTime, nil
		}
	}
	read, err := inspect(ctx, r.reg, repo, t, true, p.platforms)
	if err != nil {
		return nil, err
	}
	res.ConfigReads++
	in.put(t, read, true)
	return read, nil
}

// newerBuild orders two candidates as newest-build does: the newer build, then
// the lexically greater tag.
func newerBuild(a *TagInfo, ta string, b *TagInfo, tb string) bool {
	if c := a.Created.Compare(b.Created); c != 0 {
		return c > 0
	}
	return ta > tb
}

// pushedOrder puts the tags pushed last first; a tag whose push time is unknown
// comes before all (it cannot be bounded); ties by tag, greatest first.
func pushedOrder(a, b *TagRecord) int {
	switch {
	case a.Pushed.IsZero() != b.Pushed.IsZero():
		if a.Pushed.IsZero() {
			return -1
		}
		return 1
	case !a.Pushed.Equal(b.Pushed):
		return b.Pushed.Compare(a.Pushed)
	}
	return cmp.Compare(b.Tag, a.Tag)
}

// pushedBefore reports whether rec was pushed (clock skew allowed) before a
// build at built: its own build, never later than its push, is older.
func (r *Resolver) pushedBefore(rec *TagRecord, built time.Time) bool {
	return rec != nil && !rec.Pushed.IsZero() && rec.Pushed.Add(r.clockSkew).Before(built)
}

package render

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net/url"
	"path"
	"strings"
	"sync/atomic"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	gitobject "github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp/capability"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp/sideband"
	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	"github.com/go-git/go-git/v5/storage/memory"
)

// remoteSpec is a remote Kustomize entry read the way kustomize reads it
// (sigs.k8s.io/kustomize/api/internal/git.NewRepoSpecFromURL), for HTTP(S) only.
type remoteSpec struct {
	url *url.URL // the entry as an HTTP(S) URL, for a file fetch
	// repo is the git repository the entry names, when it parses as one; sub the
	// directory inside it; ref the ?ref= (or ?version=), "" for the default branch.
	repo *url.URL
	sub  string
	ref  string
	// explicitGit: the entry says it is a git repository (git::, "//", ".git",
	// "_git/", a ref query, github.com/ without a scheme), so no file is tried.
	explicitGit bool
}

// parseRemoteRef reads a remote entry. Only HTTPS and HTTP URLs are fetched: ssh
// and scp-style URLs need keys, git:// a daemon, file:// a local path, none of which
// a render has.
func parseRemoteRef(ref string) (*remoteSpec, error) {
	s := strings.TrimSpace(ref)
	spec := &remoteSpec{}
	if len(s) >= 5 && strings.EqualFold(s[:5], "git::") {
		s, spec.explicitGit = s[5:], true
	}
	lower := strings.ToLower(s)
	switch {
	case strings.HasPrefix(lower, "https://"), strings.HasPrefix(lower, "http://"):
	case strings.HasPrefix(lower, "github.com/"):
		s, spec.explicitGit = "https://"+s, true // kustomize's reading of github.com/org/repo
	default:
		return nil, fmt.Errorf("%w: only https:// URLs (and http:// to hosts listed so) are fetched; ssh, scp-style (git@host:org/repo), git:// and file:// are not: write it as https://host/org/repo//path?ref=...", ErrRemote)
	}
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("%w: not a URL", ErrRemoteFetch)
	}
	spec.url = u
	q := u.Query()
	spec.ref = q.Get("version")
	if r := q.Get("ref"); r != "" {
		spec.ref = r
	}
	if q.Has("ref") || q.Has("version") {
		spec.explicitGit = true
	}
	repoPath, sub, explicit, ok := splitRepoPath(strings.TrimPrefix(u.Path, "/"))
	if !ok {
		return spec, nil
	}
	spec.explicitGit = spec.explicitGit || explicit
	sub = strings.Trim(sub, "/")
	if c := path.Clean("/" + sub); sub != "" && (strings.HasPrefix(path.Clean(sub), "..") || c == "/") {
		return nil, fmt.Errorf("%w: the path %q leaves the repository", ErrRemoteFetch, sub)
	}
	if sub != "" {
		sub = path.Clean(sub)
	}
	spec.repo = &url.URL{Scheme: u.Scheme, User: u.User, Host: u.Host, Path: "/" + repoPath}
	spec.sub = sub
	return spec, nil
}

// splitRepoPath splits a URL path into the repository and the directory inside it,
// by kustomize's markers ("_git/", "//", ".git") or else as org/repo/rest.
func splitRepoPath(p string) (repo, sub string, explicit, ok bool) {
	if i := strings.Index(p, "_git/"); i >= 0 {
		segs := strings.Split(p[i+len("_git/"):], "/")
		return p[:i+len("_git/")] + segs[0], strings.Join(segs[1:], "/"), true, true
	}
	if i := strings.Index(p, "//"); i >= 0 {
		return p[:i], p[i+2:], true, p[:i] != ""
	}
	if i := strings.Index(p, ".git"); i >= 0 && (i+4 == len(p) || p[i+4] == '/') {
		return p[:i+len(".git")], p[i+len(".git"):], true, true
	}
	segs := strings.Split(p, "/")
	if len(segs) < 2 || segs[0] == "" || segs[1] == "" {
		return "", "", false, false
	}
	return strings.Join(segs[:2], "/"), strings.Join(segs[2:], "/"), false, true
}

// fetchGit fetches the commit spec names (depth 1, over smart HTTP, without
// credentials) and holds its tree in memory, once per repository and ref in a
// render (each directory of it is another entry). Submodules are not fetched, and
// symbolic links in the tree are not followed.
func (r *remoteFetcher) fetchGit(t *remoteTree, spec *remoteSpec) error {
	shown := redactedURL(spec.repo)
	at := spec.ref
	if at == "" {
		at = "its default branch"
	}
	t.source = shown
	fail := func(err error) error {
		return fmt.Errorf("%w: git repository %s at %s: %v", ErrRemoteFetch, shown, at, err)
	}
	if !remoteHostsAllow(r.hosts, spec.repo) {
		return r.notAllowed(spec.repo)
	}
	key := canonicalRepo(spec.repo) + "?ref=" + spec.ref
	held, ok := r.repos[key] // another directory of a repository fetched already
	if !ok {
		var err error
		if held, err = r.fetchTree(shown, spec.ref); err != nil {
			return fail(err)
		}
		r.repos[key] = held
	}
	t.id, t.commit = held.id, held.commit
	if spec.sub != "" && !r.mem.IsDir("/"+t.id+"/"+spec.sub) {
		return fail(fmt.Errorf("it has no directory %s", spec.sub))
	}
	t.sub = spec.sub
	return nil
}

// gitTree is a git repository's tree held in memory under /id/.
type gitTree struct{ id, commit string }

// fetchTree fetches the commit ref names in the repository at shown and holds
// its files in memory.
func (r *remoteFetcher) fetchTree(shown, ref string) (gitTree, error) {
	pack, want, err := r.fetchPack(shown, ref)
	if err != nil {
		return gitTree{}, err
	}
	st := &heldStorage{Storage: memory.NewStorage(), f: r}
	defer st.release()
	commit, err := r.unpackCommit(st, pack, want)
	if err != nil {
		return gitTree{}, err
	}
	pack = nil
	tree, err := commit.Tree()
	if err != nil {
		return gitTree{}, err
	}
	g := gitTree{id: treeID("git " + shown + " " + commit.Hash.String()), commit: commit.Hash.String()}
	return g, r.holdTreeFiles(g.id, tree)
}

// fetchPack asks the repository at shown (no credentials: they are not sent) for
// the commit ref names, "" for the default branch, at depth 1 where the server
// allows it, and returns the pack whole with the commit's hash. The pack is read
// whole (within the network bound) and its objects' sizes are checked before any
// is unpacked: a few KiB of pack can inflate to gigabytes.
func (r *remoteFetcher) fetchPack(shown, ref string) ([]byte, plumbing.Hash, error) {
	ep, err := transport.NewEndpoint(shown) // no credentials: they are not sent
	if err != nil {
		return nil, plumbing.ZeroHash, err
	}
	sess, err := githttp.NewClient(r.client).NewUploadPackSession(ep, nil)
	if err != nil {
		return nil, plumbing.ZeroHash, err
	}
	defer sess.Close()
	ar, err := sess.AdvertisedReferencesContext(r.ctx)
	if err != nil {
		return nil, plumbing.ZeroHash, r.gitError(err)
	}
	want, err := pickRef(ar, ref)
	if err != nil {
		return nil, plumbing.ZeroHash, err
	}
	req := packp.NewUploadPackRequestFromCapabilities(ar.Capabilities)
	req.Wants = []plumbing.Hash{want}
	if ar.Capabilities.Supports(capability.Shallow) {
		req.Depth = packp.DepthCommits(1)
		_ = req.Capabilities.Set(capability.Shallow)
	}
	if ar.Capabilities.Supports(capability.NoProgress) {
		_ = req.Capabilities.Set(capability.NoProgress)
	}
	resp, err := sess.UploadPack(r.ctx, req)
	if err != nil {
		return nil, plumbing.ZeroHash, r.gitError(err)
	}
	defer resp.Close()
	pack, err := io.ReadAll(demuxSideband(req.Capabilities, resp))
	if err != nil {
		return nil, plumbing.ZeroHash, r.gitError(err)
	}
	if err := checkPackSizes(pack); err != nil {
		return nil, plumbing.ZeroHash, err
	}
	return pack, want, nil
}

// unpackCommit unpacks pack into st and returns the commit want names.
func (r *remoteFetcher) unpackCommit(st *heldStorage, pack []byte, want plumbing.Hash) (*gitobject.Commit, error) {
	if err := packfile.UpdateObjectStorage(st, bytes.NewReader(pack)); err != nil {
		return nil, r.gitError(err)
	}
	return commitOf(st, want)
}

// holdTreeFiles writes tree's regular and executable files into memory under
// /id/, within the sidecar's bounds on their count and sizes.
func (r *remoteFetcher) holdTreeFiles(id string, tree *gitobject.Tree) error {
	files := 0
	return tree.Files().ForEach(func(f *gitobject.File) error {
		if f.Mode != filemode.Regular && f.Mode != filemode.Executable {
			return nil
		}
		if !fs.ValidPath(f.Name) {
			return fmt.Errorf("its tree names a file %q (a server that lies)", f.Name)
		}
		if files++; files > maxRemoteFiles {
			return fmt.Errorf("more than %d files (a bound of the sidecar)", maxRemoteFiles)
		}
		if f.Size > maxFileSize {
			return fmt.Errorf("%s is larger than %d MiB (a bound of the sidecar)", f.Name, maxFileSize>>20)
		}
		if err := r.hold(f.Size); err != nil {
			return err
		}
		rd, err := f.Reader()
		if err != nil {
			return err
		}
		data, err := io.ReadAll(rd)
		rd.Close()
		if err != nil {
			return err
		}
		return r.mem.WriteFile("/"+id+"/"+f.Name, data)
	})
}

// checkPackSizes refuses a pack whose objects, unpacked, would exceed a file's
// bound or together the render's: the size of a whole object is in its header, a
// delta's result in the first bytes of the delta, so this reads no object whole.
func checkPackSizes(pack []byte) error {
	sc := packfile.NewScanner(bytes.NewReader(pack))
	_, count, err := sc.Header()
	if err != nil {
		return err
	}
	var total int64
	for i := uint32(0); i < count; i++ {
		oh, err := sc.NextObjectHeader()
		if err != nil {
			return err
		}
		size := oh.Length // a whole object's; a delta's result is in its first bytes
		if oh.Type.IsDelta() {
			head := &headWriter{}
			if _, _, err := sc.NextObject(head); err != nil {
				return err
			}
			size = deltaTargetSize(head.b)
		} else if size <= maxFileSize { // a larger one is refused without inflating it
			if _, _, err := sc.NextObject(io.Discard); err != nil {
				return err
			}
		}
		if size > maxFileSize {
			return fmt.Errorf("it holds an object of %d bytes, over %d MiB (a bound of the sidecar)", size, maxFileSize>>20)
		}
		if total += size; total > maxRemoteHeldBytes {
			return fmt.Errorf("it unpacks to more than %d MiB (a bound of the sidecar)", maxRemoteHeldBytes>>20)
		}
	}
	return nil
}

// headWriter keeps the first bytes written to it and drops the rest.
type headWriter struct{ b []byte }

func (w *headWriter) Write(p []byte) (int, error) {
	if room := 32 - len(w.b); room > 0 {
		w.b = append(w.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

// deltaTargetSize reads the size of a git delta's result: after the base's size,
// both little-endian base-128 numbers. A delta too short to say is "too large".
func deltaTargetSize(d []byte) int64 {
	var sizes [2]int64
	for k := range sizes {
		var shift uint
		for {
			if len(d) == 0 || shift > 56 {
				return math.MaxInt64
			}
			c := d[0]
			d = d[1:]
			sizes[k] |= int64(c&0x7f) << shift
			shift += 7
			if c&0x80 == 0 {
				break
			}
		}
	}
	return sizes[1]
}

// gitError says what a git transport error means to the app's owner.
func (r *remoteFetcher) gitError(err error) error {
	switch {
	case errors.Is(err, transport.ErrAuthenticationRequired), errors.Is(err, transport.ErrAuthorizationFailed):
		return errors.New("the repository requires credentials; remote bases are fetched without any: vendor it into the app's repository")
	case errors.Is(err, transport.ErrRepositoryNotFound):
		return errors.New("repository not found")
	}
	var hr *hostRefused
	if errors.As(err, &hr) {
		return fmt.Errorf("redirected to %s, which is not on an allowed host (kustomizeRemoteHosts: %s)", hr.u, r.hostList())
	}
	return unwrapURLError(err)
}

// pickRef is the commit (or tag) ref names, as `git fetch origin <ref>` finds it:
// a full hash as given; else the ref, refs/<ref>, a tag, a branch; "" is HEAD.
func pickRef(ar *packp.AdvRefs, ref string) (plumbing.Hash, error) {
	if ref == "" {
		if ar.Head == nil {
			return plumbing.ZeroHash, errors.New("the repository has no default branch")
		}
		return *ar.Head, nil
	}
	if len(ref) == 40 && strings.Trim(strings.ToLower(ref), "0123456789abcdef") == "" {
		return plumbing.NewHash(ref), nil
	}
	for _, name := range []string{ref, "refs/" + ref, "refs/tags/" + ref, "refs/heads/" + ref} {
		if h, ok := ar.Peeled[name]; ok {
			return h, nil
		}
		if h, ok := ar.References[name]; ok {
			return h, nil
		}
	}
	return plumbing.ZeroHash, fmt.Errorf("no tag or branch %q (ref= takes a tag, a branch or a full commit hash)", ref)
}

// commitOf is the commit h names, through an annotated tag.
func commitOf(st *heldStorage, h plumbing.Hash) (*gitobject.Commit, error) {
	obj, err := gitobject.GetObject(st, h)
	if err != nil {
		return nil, fmt.Errorf("the answer lacks %s: %w", h, err)
	}
	switch o := obj.(type) {
	case *gitobject.Commit:
		return o, nil
	case *gitobject.Tag:
		return o.Commit()
	}
	return nil, fmt.Errorf("%s is a %s, not a commit", h, obj.Type())
}

// demuxSideband takes the pack out of a side-band answer.
func demuxSideband(caps *capability.List, r io.Reader) io.Reader {
	switch {
	case caps.Supports(capability.Sideband64k):
		return sideband.NewDemuxer(sideband.Sideband64k, r)
	case caps.Supports(capability.Sideband):
		return sideband.NewDemuxer(sideband.Sideband, r)
	}
	return r
}

// heldStorage counts the git objects it holds against the render's bound.
type heldStorage struct {
	*memory.Storage
	f    *remoteFetcher
	held atomic.Int64
}

func (s *heldStorage) SetEncodedObject(o plumbing.EncodedObject) (plumbing.Hash, error) {
	if err := s.f.hold(o.Size()); err != nil {
		return plumbing.ZeroHash, err
	}
	s.held.Add(o.Size())
	return s.Storage.SetEncodedObject(o)
}

// release gives back what the objects held, once their files are copied out.
func (s *heldStorage) release() { s.f.heldLeft.Add(s.held.Load()) }

package render

import (
	"context"
	"errors"
	"fmt"
	"io"

	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"
)

// Renderer opens renders of application sources: InProcess in this process, or
// Workers in child processes that can be stopped.
type Renderer interface {
	// Open renders dir and finds its image fields (FindImages, with
	// opts.ExtraImagePaths). The caller reads Uses, applies its edits, writes the
	// output and closes the Session.
	Open(ctx context.Context, dir string, opts Options) (Session, error)
}

// Session is one rendered source, held for the two phases of a render: its image
// fields are read (Uses), then the caller's edits are applied (Apply) and the
// objects written (WriteTo), as Write prints them. Where the objects are held
// (this process, or a worker process that streams them) is the Renderer's
// business: the bytes written are the same. Close releases the session; it may be
// called at any point, and more than once.
type Session interface {
	// Kind is the source kind; Remote the remote Kustomize inputs fetched.
	Kind() SourceKind
	Remote() []RemoteInput
	// Uses are the image fields of the objects, in order (ImageUse.Index).
	Uses() []ImageUse
	// Apply applies edits to the objects; an error leaves nothing to write.
	Apply(edits Edits) error
	// WriteTo writes the objects, once.
	WriteTo(w io.Writer) (int64, error)
	Close()
}

// Edits are what a caller changes in a rendered source: image fields (by the
// ImageUse.Index of their use) set to new references with SetImage, then
// annotations set on objects (by ImageUse.ObjectIndex) with Annotate, in order.
type Edits struct {
	Images      []ImageEdit      `json:"images,omitempty"`
	Annotations []AnnotationEdit `json:"annotations,omitempty"`
}

// ImageEdit sets the image field of use Use to Ref.
type ImageEdit struct {
	Use int    `json:"use"`
	Ref string `json:"ref"`
}

// AnnotationEdit sets metadata.annotations[Key] = Value on object Object.
type AnnotationEdit struct {
	Object int    `json:"object"`
	Key    string `json:"key"`
	Value  string `json:"value"`
}

// apply applies e to objs, whose image fields are uses.
func (e Edits) apply(objs []*kyaml.RNode, uses []ImageUse) error {
	for _, ie := range e.Images {
		if ie.Use < 0 || ie.Use >= len(uses) {
			return fmt.Errorf("image edit of use %d: the render has %d image fields", ie.Use, len(uses))
		}
		if err := SetImage(uses[ie.Use], ie.Ref); err != nil {
			return err
		}
	}
	for _, a := range e.Annotations {
		if a.Object < 0 || a.Object >= len(objs) {
			return fmt.Errorf("annotation of object %d: the render has %d objects", a.Object, len(objs))
		}
		if err := Annotate(objs[a.Object], a.Key, a.Value); err != nil {
			return fmt.Errorf("annotate %s: %w", objectRef(objs[a.Object]), err)
		}
	}
	return nil
}

// InProcess is the Renderer that renders in this process. A render stopped at its
// deadline returns at once, but a Helm template that loops goes on in the
// background until it ends (Go cannot stop it): use it where the process itself
// ends with the render (the `generate` command), Workers in a long-lived daemon.
type InProcess struct{}

// Render calls Render.
func (InProcess) Render(ctx context.Context, dir string, opts Options) (*Rendered, error) {
	return Render(ctx, dir, opts)
}

// Open renders dir with Render and finds its image fields; the Session holds the
// objects.
func (InProcess) Open(ctx context.Context, dir string, opts Options) (Session, error) {
	return openLocal(ctx, dir, opts)
}

func openLocal(ctx context.Context, dir string, opts Options) (*localSession, error) {
	r, err := Render(ctx, dir, opts)
	if err != nil {
		return nil, err
	}
	uses, err := FindImages(r.Objects, opts.ExtraImagePaths...)
	if err != nil {
		return nil, err
	}
	return &localSession{r: r, uses: uses}, nil
}

// localSession is a Session over objects held in this process.
type localSession struct {
	r       *Rendered
	uses    []ImageUse
	applied bool
}

func (s *localSession) Kind() SourceKind      { return s.r.Kind }
func (s *localSession) Remote() []RemoteInput { return s.r.Remote }
func (s *localSession) Uses() []ImageUse      { return s.uses }

func (s *localSession) Apply(e Edits) error {
	if s.r == nil || s.applied {
		return errors.New("render session: edits applied twice or after close")
	}
	s.applied = true
	return e.apply(s.r.Objects, s.uses)
}

func (s *localSession) WriteTo(w io.Writer) (int64, error) {
	if s.r == nil {
		return 0, errors.New("render session: written after close")
	}
	cw := &countingWriter{w: w}
	err := Write(cw, s.r.Objects)
	return cw.n, err
}

func (s *localSession) Close() { s.r, s.uses = nil, nil }

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

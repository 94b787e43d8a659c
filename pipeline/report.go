package pipeline

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/argocd-image-resolver/argocd-image-resolver/render"
)

// WriteNotes tells w (stderr) what a render resolved, skipped, served stale or
// warned about. Argo CD logs the stderr of a successful run and shows that of a
// failed one. A nil report writes nothing.
func (r *Report) WriteNotes(w io.Writer) {
	if r == nil {
		return
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "argocd-image-resolver: warning: %s\n", n)
	}
	for _, s := range r.Stale {
		fmt.Fprintf(w, "argocd-image-resolver: stale: %s\n", s)
	}
	for _, in := range r.Remote {
		fmt.Fprintf(w, "argocd-image-resolver: fetched: %s\n", in)
	}
}

// WriteTable writes the report as preview's table: one row per image field.
func (r *Report) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "source: %s\n", r.Kind)
	for _, in := range r.Remote {
		fmt.Fprintf(w, "remote: %s\n", in)
	}
	if len(r.Substitutions) == 0 {
		_, err := fmt.Fprintln(w, "no image field is named by a policy; nothing to resolve")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ALIAS\tOBJECT\tFIELD\tIN SOURCE\tRESOLVED\tWHY")
	for _, s := range r.Substitutions {
		res := s.Answer.Result
		why := Describe(s.Request, res)
		for _, sk := range res.Skipped {
			why += fmt.Sprintf("; skipped %s: %s", sk.Tag, sk.Reason)
		}
		if len(res.Stale) > 0 {
			why += "; STALE: " + strings.Join(res.Stale, ", ")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", s.Policy.Alias, s.Use.Object, s.Use.Path, s.Use.Raw, s.NewRef, why)
	}
	return tw.Flush()
}

// ReportView is the report as preview -o json prints it.
type ReportView struct {
	Source render.SourceKind `json:"source"`
	Images []ImageView       `json:"images"`
	Stale  []string          `json:"stale,omitempty"`
	Notes  []string          `json:"notes,omitempty"`
	// Remote are the remote Kustomize inputs fetched, with each git commit.
	Remote []render.RemoteInput `json:"remote,omitempty"`
}

// ImageView is one image field of ReportView.
type ImageView struct {
	Alias    string `json:"alias"`
	Object   string `json:"object"`
	Field    string `json:"field"`
	InSource string `json:"inSource"`
	Resolved string `json:"resolved"`
	Why      string `json:"why"`
	// Result is the resolution: tag, digest, platforms, skipped tags.
	Result any `json:"result"`
}

// View returns the report's JSON form.
func (r *Report) View() ReportView {
	v := ReportView{Source: r.Kind, Images: []ImageView{}, Stale: r.Stale, Notes: r.Notes, Remote: r.Remote}
	for _, s := range r.Substitutions {
		v.Images = append(v.Images, ImageView{Alias: s.Policy.Alias, Object: s.Use.Object.String(), Field: s.Use.Path,
			InSource: s.Use.Raw, Resolved: s.NewRef, Why: Describe(s.Request, s.Answer.Result), Result: s.Answer.Result})
	}
	return v
}

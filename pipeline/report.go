package pipeline

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/argocd-image-resolver/argocd-image-resolver/pin"
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
	for _, h := range r.holdViews() {
		fmt.Fprintf(w, "argocd-image-resolver: held: %s %s is not pinned again: %s; %s\n", h.Alias, h.Reference, h.Reason, h.Lift)
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
		why := r.why(s)
		if res := s.Answer.Result; res != nil && s.FromPin == nil {
			for _, sk := range res.Skipped {
				why += fmt.Sprintf("; skipped %s: %s", sk.Tag, sk.Reason)
			}
			if len(res.Stale) > 0 {
				why += "; STALE: " + strings.Join(res.Stale, ", ")
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", s.Policy.Alias, s.Use.Object, s.Use.Path, s.Use.Raw, s.NewRef, why)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, h := range r.holdViews() {
		fmt.Fprintf(w, "held: %s %s: %s; not pinned again. To lift: %s\n", h.Alias, h.Reference, h.Reason, h.Lift)
	}
	return nil
}

// why says why a substitution got its reference: pinned in git (pin-mode use),
// or the resolution's description, and that the reference is held when it is.
func (r *Report) why(s *Substitution) string {
	if s.FromPin != nil {
		return "pinned in " + s.pinFile
	}
	res := s.Answer.Result
	if res == nil {
		return "not resolved: " + s.Answer.Error
	}
	why := Describe(s.Request, res)
	if r.IsHeld(s.Policy.Alias, res.ReferenceFor(s.Request.Image)) {
		why += "; HELD: not pinned (held in " + pin.PinsFile + ")"
	}
	return why
}

// HoldView is a held reference as preview shows it.
type HoldView struct {
	Alias     string `json:"alias"`
	Reference string `json:"reference"`
	Commit    string `json:"commit,omitempty"`
	Reason    string `json:"reason"`
	// Lift says how to lift the hold.
	Lift string `json:"lift"`
}

// holdViews are the report's holds, in alias order.
func (r *Report) holdViews() []HoldView {
	var out []HoldView
	for _, alias := range slices.Sorted(maps.Keys(r.Holds)) {
		h := r.Holds[alias]
		reason := h.Reason
		if reason == "" {
			reason = "held in git"
		}
		out = append(out, HoldView{Alias: alias, Reference: h.Reference, Commit: h.Commit, Reason: reason,
			Lift: fmt.Sprintf("delete held.%s from %s (a newer reference lifts it by itself)", alias, pin.PinsFile)})
	}
	return out
}

// ReportView is the report as preview -o json prints it.
type ReportView struct {
	Source render.SourceKind `json:"source"`
	Images []ImageView       `json:"images"`
	Stale  []string          `json:"stale,omitempty"`
	Notes  []string          `json:"notes,omitempty"`
	// Remote are the remote Kustomize inputs fetched, with each git commit.
	Remote []render.RemoteInput `json:"remote,omitempty"`
	// Held are the references held in the app's pins file: not pinned again.
	Held []HoldView `json:"held,omitempty"`
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
	v := ReportView{Source: r.Kind, Images: []ImageView{}, Stale: r.Stale, Notes: r.Notes, Remote: r.Remote, Held: r.holdViews()}
	for _, s := range r.Substitutions {
		v.Images = append(v.Images, ImageView{Alias: s.Policy.Alias, Object: s.Use.Object.String(), Field: s.Use.Path,
			InSource: s.Use.Raw, Resolved: s.NewRef, Why: r.why(s), Result: s.Answer.Result})
	}
	return v
}

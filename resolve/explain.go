package resolve

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// maxRejectedShown bounds the rejected tags an explanation lists; the rest are counted.
const maxRejectedShown = 50

// WriteText writes the result for a person: the reference, then digest, strategy,
// platforms and skipped tags. With explain it also walks every candidate considered
// and the tags left out, each with its reason.
func (r *Result) WriteText(w io.Writer, explain bool) error {
	var b strings.Builder
	if r.Reference != "" {
		fmt.Fprintln(&b, r.Reference)
	} else {
		fmt.Fprintf(&b, "%s: no tag qualifies\n", r.Image)
	}
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	if r.Digest != "" {
		fmt.Fprintf(tw, "  digest\t%s\n", r.Digest)
	}
	fmt.Fprintf(tw, "  strategy\t%s\n", r.Strategy)
	switch {
	case r.MetadataAPI != "" && explain:
		fmt.Fprintf(tw, "  listed by\t%s API (build times: %d candidates read through the OCI protocol, %d asked of the API)\n", r.MetadataAPI, r.ConfigReads, r.BuildTimeReads)
	case r.MetadataAPI != "":
		fmt.Fprintf(tw, "  listed by\t%s API\n", r.MetadataAPI)
	case r.MetadataFallback != "":
		fmt.Fprintf(tw, "  listed by\tOCI protocol (the metadata API failed: %s)\n", r.MetadataFallback)
	}
	fmt.Fprintf(tw, "  candidates\t%d\n", r.Candidates)
	plats := "any (no platform required)"
	if len(r.Platforms) > 0 {
		plats = strings.Join(r.Platforms, ",")
	}
	fmt.Fprintf(tw, "  platforms\t%s\n", plats)
	for _, s := range r.Skipped {
		fmt.Fprintf(tw, "  skipped\t%s: %s\n", s.Tag, s.Reason)
	}
	for _, st := range r.Stale {
		fmt.Fprintf(tw, "  stale\t%s\n", st)
	}
	for _, warn := range r.Warnings {
		fmt.Fprintf(tw, "  warning\t%s\n", warn)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if explain {
		fmt.Fprintln(&b, "considered, best first:")
		for _, c := range r.Considered {
			fmt.Fprintf(&b, "  %-8s %s", c.Outcome, c.Tag)
			if !c.Created.IsZero() {
				fmt.Fprintf(&b, " (built %s)", c.Created.UTC().Format(time.RFC3339))
			}
			if len(c.Platforms) > 0 {
				fmt.Fprintf(&b, " [%s]", joinPlatforms(c.Platforms))
			}
			fmt.Fprintf(&b, ": %s\n", c.Reason)
		}
		if rest := r.Candidates - len(r.Considered); rest > 0 && r.Tag != "" {
			fmt.Fprintf(&b, "  %d lower candidates not needed\n", rest)
		}
		if len(r.Rejected) > 0 {
			fmt.Fprintf(&b, "left out (%d):\n", len(r.Rejected))
			for i, rej := range r.Rejected {
				if i == maxRejectedShown {
					fmt.Fprintf(&b, "  ... and %d more\n", len(r.Rejected)-i)
					break
				}
				fmt.Fprintf(&b, "  %s: %s\n", rej.Tag, rej.Reason)
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

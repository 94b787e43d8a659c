package pin

import (
	"fmt"
	"strings"

	"github.com/argocd-image-resolver/argocd-image-resolver/pin/forge"
)

// maxBodyBytes bounds a pull request's body (GitHub takes 65536 characters).
const maxBodyBytes = 60000

// spec is the pull request of a group: the title is the commit message's
// subject; the body explains each pin as --explain does.
func (p *prTarget) spec(base string, g *prGroup) (forge.Spec, error) {
	msg, err := p.message(base, g.applied)
	if err != nil {
		return forge.Spec{}, err
	}
	title, _, _ := strings.Cut(strings.TrimSpace(msg), "\n")
	return forge.Spec{
		Head: g.branch, Base: base, Title: title, Body: prBody(base, g),
		Labels: p.forge.Labels, Reviewers: p.forge.Reviewers, Assignees: p.forge.Assignees, AutoMerge: p.forge.AutoMerge,
	}, nil
}

// prBody explains a group's pins: for each, the old and new reference, the
// policy, the better tags passed over and why, and a link to the registry
// where one is known.
func prBody(base string, g *prGroup) string {
	var b strings.Builder
	fmt.Fprintf(&b, "argocd-image-resolver pins these images on `%s` (pin-push: pull-request). Merge to roll them out. "+
		"Close to keep what `%s` has: a pull request closed with these very references is not opened again; a newer image opens a new one.\n\n", base, base)
	b.WriteString("| App | Image | From | To | Policy |\n|---|---|---|---|---|\n")
	var notes []string
	shown := 0
	for _, a := range g.applied {
		row := fmt.Sprintf("| %s | %s | %s | %s | %s |\n", cell(a.App), imageCell(a.Pin), refCell(a.Old), refCell(a.Pin.Reference), cell(a.Pin.Policy))
		if b.Len()+len(row) > maxBodyBytes-2000 {
			break
		}
		b.WriteString(row)
		shown++
		for _, s := range a.Pin.Skipped {
			notes = append(notes, fmt.Sprintf("- %s %s: passed over %s", cell(a.App), cell(a.Pin.Alias), cell(s)))
		}
	}
	if shown < len(g.applied) {
		fmt.Fprintf(&b, "\n… and %d more pins (see the commit).\n", len(g.applied)-shown)
	}
	if len(notes) > 0 {
		b.WriteString("\nBetter tags passed over:\n")
		for _, n := range notes {
			if b.Len()+len(n) > maxBodyBytes-500 {
				b.WriteString("- …\n")
				break
			}
			b.WriteString(n + "\n")
		}
	}
	fmt.Fprintf(&b, "\n<sub>Branch `%s` belongs to argocd-image-resolver: it is rebuilt from `%s` when these pins change. "+
		"Files: %s.</sub>\n", g.branch, base, filesOf(g.applied))
	return b.String()
}

// cell makes s safe in a Markdown table cell.
func cell(s string) string {
	return strings.NewReplacer("|", "\\|", "\n", " ", "\r", " ").Replace(s)
}

func refCell(ref string) string {
	if ref == "" {
		return "(no pin)"
	}
	return "`" + cell(ref) + "`"
}

// imageCell is the alias and the image, linked to the registry's page where
// one is known.
func imageCell(p Pin) string {
	img := "`" + cell(p.Image) + "`"
	if u := registryPage(p.Image); u != "" {
		img = "[" + img + "](" + u + ")"
	}
	return cell(p.Alias) + " " + img
}

// registryPage is the web page of an image's repository on the registries
// whose page is known; "" for others.
func registryPage(image string) string {
	host, path, ok := strings.Cut(image, "/")
	if !ok || !strings.ContainsAny(host, ".:") && host != "localhost" {
		host, path = "docker.io", image
	}
	switch {
	case host == "docker.io" || host == "index.docker.io":
		if !strings.Contains(path, "/") {
			return "https://hub.docker.com/_/" + path
		}
		return "https://hub.docker.com/r/" + path
	case host == "ghcr.io":
		return "https://ghcr.io/" + path
	case host == "quay.io":
		return "https://quay.io/repository/" + path
	case host == "gcr.io" || strings.HasSuffix(host, "-docker.pkg.dev"):
		return "https://" + host + "/" + path
	}
	return ""
}

func filesOf(applied []appliedPin) string {
	var files []string
	seen := map[string]bool{}
	for _, a := range applied {
		if !seen[a.File] {
			seen[a.File] = true
			files = append(files, "`"+a.File+"`")
		}
	}
	if len(files) > 10 {
		return fmt.Sprintf("%s and %d more", strings.Join(files[:10], ", "), len(files)-10)
	}
	return strings.Join(files, ", ")
}

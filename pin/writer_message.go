package pin

import (
	"bytes"
	"fmt"
	"strings"
	"text/template"
)

// MessageData is what a commit message template (WithMessage) is executed with.
type MessageData struct {
	Repository string // the repository's URL, without credentials
	Branch     string
	// Apps are the apps whose pins the commit changes, in the order of the
	// changes.
	Apps []string
	// Changes are the pins the commit sets, one per app and alias.
	Changes []MessageChange
}

// MessageChange is one pin a commit sets.
type MessageChange struct {
	App   string
	Alias string
	Image string // the repository as the policy wrote it
	File  string // the repository path of the file changed
	// Old is the reference replaced ("" when the alias had no pin); New the one
	// set. Both are whole references (image:tag, or image:tag@digest).
	Old, New string
	Tag      string // New's tag
	Policy   string // why this tag was chosen
}

// messageTemplate is a parsed WithMessage template.
type messageTemplate struct {
	text string
	tmpl *template.Template
	err  error
}

func parseMessage(text string) *messageTemplate {
	m := &messageTemplate{text: text}
	m.tmpl, m.err = template.New("message").Option("missingkey=error").Parse(text)
	if m.err == nil {
		// a template that fails on every commit is better found now
		_, m.err = m.execute(sampleMessage)
	}
	if m.err != nil {
		m.err = fmt.Errorf("git commit message template %q: %w (accepted: a Go text/template over .Repository, .Branch, .Apps and .Changes: .App, .Alias, .Image, .File, .Old, .New, .Tag, .Policy)", text, m.err)
	}
	return m
}

var sampleMessage = MessageData{
	Repository: "https://git.example.com/org/apps.git", Branch: "main", Apps: []string{"web-prod"},
	Changes: []MessageChange{{App: "web-prod", Alias: "web", Image: "ghcr.io/org/web", File: "apps/web/.argocd-image-resolver.pins.yaml",
		Old: "ghcr.io/org/web:1.2.3", New: "ghcr.io/org/web:1.3.0", Tag: "1.3.0", Policy: "semver ~1"}},
}

func (m *messageTemplate) execute(d MessageData) (string, error) {
	var b bytes.Buffer
	if err := m.tmpl.Execute(&b, d); err != nil {
		return "", err
	}
	msg := strings.TrimSpace(b.String())
	if msg == "" {
		return "", fmt.Errorf("the message is empty")
	}
	return msg + "\n", nil
}

// CheckMessage checks a commit message template as WithMessage takes it: it
// must parse and execute over a sample commit to a non-empty message.
func CheckMessage(tmpl string) error { return parseMessage(tmpl).err }

// DefaultMessage is the commit message the writer writes when no template is
// given: a subject ("argocd-image-resolver: web 1.2.3 -> 1.3.0 (web-prod)" for
// one pin, "argocd-image-resolver: pin 3 images of web-prod" for one app,
// "argocd-image-resolver: pin 3 images of 2 apps" for several), and a body with
// one line per pin.
func DefaultMessage(d MessageData) string {
	var b strings.Builder
	b.WriteString("argocd-image-resolver: ")
	switch {
	case len(d.Changes) == 1:
		c := d.Changes[0]
		if c.Old == "" {
			fmt.Fprintf(&b, "pin %s %s (%s)", c.Alias, shortRef(c.New), c.App)
		} else {
			fmt.Fprintf(&b, "%s %s -> %s (%s)", c.Alias, shortRef(c.Old), shortRef(c.New), c.App)
		}
	case len(d.Apps) == 1:
		fmt.Fprintf(&b, "pin %d images of %s", len(d.Changes), d.Apps[0])
	default:
		fmt.Fprintf(&b, "pin %d images of %d apps", len(d.Changes), len(d.Apps))
	}
	b.WriteString("\n\n")
	for _, c := range d.Changes {
		old := c.Old
		if old == "" {
			old = "(no pin)"
		}
		fmt.Fprintf(&b, "- %s %s: %s -> %s\n", c.App, c.Alias, old, c.New)
		if c.Policy != "" {
			fmt.Fprintf(&b, "  policy: %s\n", c.Policy)
		}
		fmt.Fprintf(&b, "  file: %s\n", c.File)
	}
	return b.String()
}

// shortRef is a reference without its repository: tag, tag@sha256:<12 hex> or
// @sha256:<12 hex>.
func shortRef(ref string) string {
	name, digest, _ := strings.Cut(ref, "@")
	out := ""
	if i := strings.LastIndex(name, ":"); i >= 0 && i > strings.LastIndex(name, "/") {
		out = name[i+1:]
	}
	if digest != "" {
		if algo, hex, ok := strings.Cut(digest, ":"); ok && len(hex) > 12 {
			digest = algo + ":" + hex[:12]
		}
		out += "@" + digest
	}
	if out == "" {
		return ref
	}
	return out
}

// messageData is the template data of a commit that applies pins.
func messageData(repository, branch string, applied []appliedPin) MessageData {
	d := MessageData{Repository: repository, Branch: branch}
	seen := map[string]bool{}
	for _, a := range applied {
		if !seen[a.App] {
			seen[a.App] = true
			d.Apps = append(d.Apps, a.App)
		}
		d.Changes = append(d.Changes, MessageChange{App: a.App, Alias: a.Pin.Alias, Image: a.Pin.Image, File: a.File,
			Old: a.Old, New: a.Pin.Reference, Tag: a.Pin.Tag, Policy: a.Pin.Policy})
	}
	return d
}

// commitMessage is the message of out's commit: the message of the pins
// applied (the template's, or DefaultMessage), then the holds written and
// lifted; a commit that writes holds alone has a subject of its own.
func (t *target) commitMessage(out *attempt) (string, error) {
	var b strings.Builder
	if len(out.applied) > 0 {
		msg, err := t.message(out.branch, out.applied)
		if err != nil {
			return "", err
		}
		b.WriteString(msg)
	}
	var written []heldPin
	for _, h := range out.held {
		if h.New {
			written = append(written, h)
		}
	}
	switch {
	case len(out.applied) > 0:
	case len(written) == 1:
		h := written[0]
		fmt.Fprintf(&b, "argocd-image-resolver: hold %s %s (%s)\n", h.Hold.Alias, shortRef(h.Hold.Reference), h.App)
	default:
		fmt.Fprintf(&b, "argocd-image-resolver: hold %d images\n", len(written))
	}
	if len(written) > 0 {
		b.WriteString("\nHeld: a person replaced these references in git; they are not pinned again\n")
		for _, h := range written {
			fmt.Fprintf(&b, "- %s %s: %s\n  reason: %s\n  file: %s (delete held.%s to lift the hold)\n",
				h.App, h.Hold.Alias, h.Hold.Reference, h.Hold.Reason, h.File, h.Hold.Alias)
		}
	}
	if len(out.lifted) > 0 {
		b.WriteString("\nHolds lifted: another reference is pinned\n")
		for _, h := range out.lifted {
			fmt.Fprintf(&b, "- %s %s: %s\n  file: %s\n", h.App, h.Hold.Alias, h.Hold.Reference, h.File)
		}
	}
	return b.String(), nil
}

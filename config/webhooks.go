package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// WebhookKinds are the registry webhooks the daemon serves, at /webhooks/<kind>
// on webhookAddr (package daemon/webhook says what each sender sends).
var WebhookKinds = []string{"distribution", "dockerhub", "github", "harbor", "quay", "acr", "gar", "ecr", "zot", "gitea"}

// Webhook is one kind's entry of the webhooks: section.
type Webhook struct {
	// SecretFile holds the secret (its trailing newline ignored); SecretEnv names
	// the environment variable that holds it instead. One of the two.
	SecretFile string `json:"secretFile,omitempty"`
	SecretEnv  string `json:"secretEnv,omitempty"`
	// Registry is the registry host the apps name in their images, for a sender
	// that names another one (a registry reached by an internal name) or none.
	Registry string `json:"registry,omitempty"`
}

// Webhooks are the webhooks: section, by kind.
type Webhooks map[string]Webhook

// webhooksAccepted describes the webhooks: section, for messages.
var webhooksAccepted = "webhooks: {<kind>: {secretFile: <file> or secretEnv: <variable>, registry: <host>}}, kinds " + strings.Join(WebhookKinds, ", ")

// minWebhookSecret is the shortest secret accepted: a webhook's secret is all
// that stands between the internet and a registry request per event.
const minWebhookSecret = 16

// maxWebhookSecretFile bounds a secret file.
const maxWebhookSecretFile = 4 << 10

func (c *Config) parseWebhooks(source string, raw json.RawMessage) error {
	var ws map[string]Webhook
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ws); err != nil {
		return &resolve.InputError{Field: source + ": webhooks", Value: string(raw), Accepted: webhooksAccepted, Err: err}
	}
	c.Webhooks = ws
	return nil
}

// Validate checks every entry: a known kind, one secret source, a host.
func (ws Webhooks) Validate() error {
	for _, kind := range slices.Sorted(maps.Keys(ws)) {
		w, field := ws[kind], "webhooks."+kind
		switch {
		case !slices.Contains(WebhookKinds, kind):
			return &resolve.InputError{Field: "webhooks", Value: kind, Accepted: "kinds " + strings.Join(WebhookKinds, ", ")}
		case (w.SecretFile == "") == (w.SecretEnv == ""):
			return &resolve.InputError{Field: field, Value: fmt.Sprintf("secretFile %q, secretEnv %q", w.SecretFile, w.SecretEnv),
				Accepted: "one of secretFile (a file holding the secret) or secretEnv (a variable holding it)"}
		case w.Registry != "" && !validHost(w.Registry):
			return &resolve.InputError{Field: field + ".registry", Value: w.Registry, Accepted: "a registry host[:port], e.g. registry.example.com"}
		}
	}
	return nil
}

func validHost(s string) bool {
	host := s
	if h, port, err := net.SplitHostPort(s); err == nil {
		if p, perr := strconv.Atoi(port); perr != nil || p < 1 || p > 65535 {
			return false
		}
		host = h
	}
	return host != "" && !strings.ContainsAny(host, "/ @?#")
}

// Secrets reads every webhook's secret, by kind. Errors name the kind and the
// file or variable, never the secret.
func (ws Webhooks) Secrets() (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, kind := range slices.Sorted(maps.Keys(ws)) {
		w := ws[kind]
		var secret []byte
		switch {
		case w.SecretFile != "":
			b, err := readBounded(w.SecretFile, maxWebhookSecretFile)
			if err != nil {
				return nil, fmt.Errorf("webhooks.%s.secretFile: %w", kind, err)
			}
			secret = bytes.TrimRight(b, "\r\n")
		default:
			secret = []byte(os.Getenv(w.SecretEnv))
		}
		if len(secret) < minWebhookSecret {
			src := "file " + w.SecretFile
			if w.SecretFile == "" {
				src = "variable " + w.SecretEnv
			}
			return nil, fmt.Errorf("webhooks.%s: the secret in %s has %d bytes; at least %d are needed (e.g. openssl rand -hex 24)", kind, src, len(secret), minWebhookSecret)
		}
		out[kind] = secret
	}
	return out, nil
}

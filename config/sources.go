package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"

	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// Where a Config comes from: the YAML file, the environment and flags, in that
// order of precedence, each checked with errors naming its source.

// fileKeys are the keys a configuration file accepts.
func fileKeys() []string {
	var keys []string
	for _, s := range Settings() {
		if !strings.HasPrefix(s.Key, redisSection) && !strings.HasPrefix(s.Key, trustSection) && !strings.HasPrefix(s.Key, gitSection) { // the sections'
			keys = append(keys, s.Key)
		}
	}
	return append(keys, "registries", "git", "redis", "trust", "webhooks")
}

// LoadFile applies a YAML configuration file. Unknown keys are errors; bad values
// name the file, the key, the value and the accepted form.
func (c *Config) LoadFile(path string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	return c.ParseFile(path, raw)
}

// ParseFile applies YAML configuration; source names it in errors. A YAML syntax
// error, an unknown or repeated key and a value of the wrong shape are a
// *FileError at the line and column of the problem; a bad value an
// *resolve.InputError naming the key.
func (c *Config) ParseFile(source string, raw []byte) error {
	content, err := checkYAML("config "+source, raw, configShape())
	if err != nil || !content {
		return err
	}
	js, err := yaml.YAMLToJSONStrict(raw)
	if err != nil {
		return &FileError{Source: "config " + source, Err: err}
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(js, &doc); err != nil {
		return &FileError{Source: "config " + source, Msg: "want a mapping of settings at the top level (accepted: " + strings.Join(fileKeys(), ", ") + ")"}
	}
	keys := slices.Sorted(maps.Keys(doc))
	for _, k := range keys {
		v := doc[k]
		field := source + ": " + k
		switch k {
		case "registries":
			regs, err := resolve.ParseRegistries(source, append(append([]byte(`{"registries":`), v...), '}'))
			if err != nil {
				return registriesError("config "+source, source, err)
			}
			c.Registries = regs
		case "rateLimits":
			if err := c.parseRateLimits(field, v); err != nil {
				return err
			}
		case "redis":
			if err := c.parseRedis(source, v); err != nil {
				return err
			}
		case "trust":
			if err := c.parseTrust(source, v); err != nil {
				return err
			}
		case "git":
			if err := c.parseGitSection(source, v); err != nil {
				return err
			}
		case "webhooks":
			if err := c.parseWebhooks(source, v); err != nil {
				return err
			}
		default:
			set, _ := settingByKey(k)
			s, err := scalar(v)
			if err != nil && set.Sep != "" {
				s, err = joinedList(v, set.Sep)
			}
			if err != nil {
				accepted := "a single value"
				if set.Sep != "" {
					accepted = "a list of strings, or one string of items separated by " + strconv.Quote(set.Sep)
				}
				return &resolve.InputError{Field: field, Value: string(v), Accepted: accepted, Err: err}
			}
			if err := c.Set(k, s, field); err != nil {
				return err
			}
		}
	}
	return nil
}

// loadRegistries reads and checks a registries file (--registries-config): its
// YAML as ParseFile checks the configuration's, then its values
// (resolve.ParseRegistries).
func loadRegistries(path string) ([]resolve.RegistryConfig, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("registries config: %w", err)
	}
	source := "registries config " + path
	if _, err := checkYAML(source, raw, registriesShape()); err != nil {
		return nil, err
	}
	regs, err := resolve.ParseRegistries(path, raw)
	if err != nil {
		return nil, registriesError(source, path, err)
	}
	return regs, nil
}

// registriesError keeps resolve.ParseRegistries' input errors and makes the rest
// (a value its decoding refused) a *FileError: every one is about the file.
func registriesError(source, path string, err error) error {
	var ie *resolve.InputError
	if errors.As(err, &ie) {
		return err
	}
	msg := strings.TrimPrefix(err.Error(), "registries config "+path+": ")
	return &FileError{Source: source, Key: "registries", Msg: msg, Err: err}
}

// scalar returns a JSON string or number as text.
func scalar(v json.RawMessage) (string, error) {
	var s string
	if err := json.Unmarshal(v, &s); err == nil {
		return s, nil
	}
	var n json.Number
	if err := json.Unmarshal(v, &n); err == nil {
		return n.String(), nil
	}
	return "", errors.New("not a string or number")
}

// joinedList reads a YAML list of strings as one value, its items joined by sep.
func joinedList(v json.RawMessage, sep string) (string, error) {
	var items []string
	if err := json.Unmarshal(v, &items); err != nil {
		return "", errors.New("not a string or a list of strings")
	}
	for _, it := range items {
		if strings.Contains(it, sep) {
			return "", fmt.Errorf("item %q contains the separator %q", it, sep)
		}
	}
	return strings.Join(items, sep), nil
}

func (c *Config) parseRateLimits(field string, v json.RawMessage) error {
	var items []json.RawMessage
	if err := json.Unmarshal(v, &items); err != nil {
		return &resolve.InputError{Field: field, Value: string(v), Accepted: `a list of {registry, rps, burst}, e.g. [{registry: docker.io, rps: 2, burst: 10}, {registry: "*", rps: 100}]`}
	}
	var out []resolve.RateLimit
	for i, it := range items {
		f := fmt.Sprintf("%s[%d]", field, i)
		dec := json.NewDecoder(bytes.NewReader(it))
		dec.DisallowUnknownFields()
		var rl resolve.RateLimit
		if err := dec.Decode(&rl); err != nil {
			return &resolve.InputError{Field: f, Value: string(it), Accepted: `{registry: HOST[/PATH] or "*", rps: NUMBER > 0, burst: WHOLE NUMBER >= 1 (default: rps rounded up)}`, Err: err}
		}
		if rl.RPS <= 0 || math.IsNaN(rl.RPS) {
			return &resolve.InputError{Field: f + ".rps", Value: strconv.FormatFloat(rl.RPS, 'f', -1, 64), Accepted: "a number of requests per second above 0"}
		}
		if rl.Burst == 0 {
			rl.Burst = int(math.Ceil(rl.RPS))
		}
		if rl.Burst < 1 {
			return &resolve.InputError{Field: f + ".burst", Value: strconv.Itoa(rl.Burst), Accepted: "a whole number of at least 1"}
		}
		if err := checkRateLimit(&rl); err != nil {
			return &resolve.InputError{Field: f + ".registry", Value: rl.Registry, Accepted: `a registry host[:port] with an optional /path, or "*" (quoted in YAML)`, Err: err}
		}
		if slices.ContainsFunc(out, func(x resolve.RateLimit) bool { return x.Registry == rl.Registry }) {
			return &resolve.InputError{Field: f + ".registry", Value: rl.Registry, Accepted: "each registry once"}
		}
		out = append(out, rl)
	}
	for _, rl := range out {
		c.RateLimits = mergeRateLimits(c.RateLimits, rl)
	}
	return nil
}

// ApplyEnv applies the environment variables of Settings that are set and not
// empty.
func (c *Config) ApplyEnv(lookup func(string) (string, bool)) error {
	for _, s := range Settings() {
		v, ok := lookup(s.Env)
		if !ok || v == "" {
			continue
		}
		if !s.List {
			if err := c.Set(s.Key, v, s.Env); err != nil {
				return err
			}
			continue
		}
		for _, item := range strings.Split(v, ",") {
			if strings.TrimSpace(item) == "" {
				continue
			}
			if err := c.Set(s.Key, item, s.Env); err != nil {
				return err
			}
		}
	}
	return nil
}

// Validate checks the whole configuration (values set through Set are checked as
// they are set; this catches a Config built in code and cross-field mistakes).
func (c *Config) Validate() error {
	for _, s := range Settings() {
		if s.List {
			continue
		}
		if err := s.set(&Config{}, s.get(c)); err != nil {
			return resolve.WithField(err, s.Key)
		}
	}
	seen := map[string]bool{}
	for i, rl := range c.RateLimits {
		f := fmt.Sprintf("rateLimits[%d]", i)
		cp := rl
		if err := checkRateLimit(&cp); err != nil {
			return &resolve.InputError{Field: f + ".registry", Value: rl.Registry, Accepted: `a registry host[:port] with an optional /path, or "*"`, Err: err}
		}
		if rl.RPS <= 0 || rl.Burst < 1 {
			return &resolve.InputError{Field: f, Value: rl.String(), Accepted: rateAccepted}
		}
		if seen[cp.Registry] {
			return &resolve.InputError{Field: f + ".registry", Value: rl.Registry, Accepted: "each registry once"}
		}
		seen[cp.Registry] = true
	}
	if err := c.Redis.Validate(); err != nil {
		return err
	}
	if err := c.Trust.Validate(c.Registries); err != nil {
		return err
	}
	if err := c.Webhooks.Validate(); err != nil {
		return err
	}
	switch {
	case len(c.Webhooks) > 0 && c.WebhookAddr == "":
		return &resolve.InputError{Field: "webhookAddr", Value: "", Accepted: "HOST:PORT to serve the webhooks: configured (" + strings.Join(slices.Sorted(maps.Keys(c.Webhooks)), ", ") + ") on, e.g. :8091"}
	case len(c.Webhooks) == 0 && c.WebhookAddr != "":
		return &resolve.InputError{Field: "webhooks", Value: "", Accepted: "at least one kind with its secret, for webhookAddr " + c.WebhookAddr + ": " + webhooksAccepted}
	}
	return c.Git.Validate()
}

// ---- flags ----

// Flags binds configuration flags to a flag set: --config and --registries-config
// always, and every Setting for the daemon's commands (serve, sidecar). Each flag is
// typed: its value is checked as it is parsed, and applied after the file and the
// environment.
type Flags struct {
	fs         *pflag.FlagSet
	values     map[string]*settingFlag
	config     *string
	registries *string
}

// AddFlags adds every setting's flag, with --config and --registries-config, to fs.
func AddFlags(fs *pflag.FlagSet) *Flags {
	f := AddFileFlags(fs)
	def := DefaultConfig()
	for _, s := range Settings() {
		v := &settingFlag{s: s}
		usage := fmt.Sprintf("%s (env %s)", s.Usage, s.Env)
		fs.Var(v, s.Flag, usage)
		if d := s.get(&def); d != "" || s.Key == "metricsAddr" {
			fs.Lookup(s.Flag).DefValue = d
		}
		if s.List {
			fs.Lookup(s.Flag).Usage += "; repeatable"
		}
		if s.Type == "bool" {
			fs.Lookup(s.Flag).NoOptDefVal = "true" // --redis-tls alone
		}
		f.values[s.Key] = v
	}
	return f
}

// AddFileFlags adds only --config and --registries-config to fs, for commands that
// read the operator's configuration but take their other settings from the
// environment (preview, resolve).
func AddFileFlags(fs *pflag.FlagSet) *Flags {
	f := &Flags{fs: fs, values: map[string]*settingFlag{}}
	f.config = fs.String("config", "", "YAML configuration file (env "+ConfigEnv+"); flags and env override it")
	f.registries = fs.String("registries-config", "", "registries configuration file (env "+RegistriesConfigEnv+"), instead of registries: in --config")
	return f
}

// settingFlag is the pflag.Value of one Setting: Set checks the value against the
// setting's own parser at parse time and keeps it to apply later, in precedence.
type settingFlag struct {
	s      Setting
	values []string
}

func (v *settingFlag) String() string { return strings.Join(v.values, ",") }
func (v *settingFlag) Type() string   { return v.s.Type }

func (v *settingFlag) Set(val string) error {
	var scratch Config
	if err := v.s.set(&scratch, val); err != nil {
		return err
	}
	if v.s.List {
		v.values = append(v.values, val)
	} else {
		v.values = []string{val}
	}
	return nil
}

// Load builds the configuration from its sources, in increasing precedence:
// defaults, the file (--config, else $IMAGE_RESOLVER_CONFIG), the registries file
// (--registries-config, else $IMAGE_RESOLVER_REGISTRIES_CONFIG; an error if the
// file already has registries:), the environment, then the flags given on the
// command line; then it validates it. A nil Flags reads no flags (generate).
func (f *Flags) Load(lookup func(string) (string, bool)) (Config, error) {
	if lookup == nil {
		lookup = os.LookupEnv
	}
	c := DefaultConfig()
	file, _ := lookup(ConfigEnv)
	regFile, _ := lookup(RegistriesConfigEnv)
	regField := RegistriesConfigEnv
	if f != nil && f.fs.Changed("config") {
		file = *f.config
	}
	if f != nil && f.fs.Changed("registries-config") {
		regFile, regField = *f.registries, "--registries-config"
	}
	if file != "" {
		if err := c.LoadFile(file); err != nil {
			return Config{}, err
		}
	}
	if regFile != "" {
		if len(c.Registries) > 0 {
			return Config{}, &resolve.InputError{Field: regField, Value: regFile,
				Accepted: fmt.Sprintf("registries in one place: %s already has registries:", file)}
		}
		regs, err := loadRegistries(regFile)
		if err != nil {
			return Config{}, err
		}
		c.Registries = regs
	}
	if err := c.ApplyEnv(lookup); err != nil {
		return Config{}, err
	}
	if f != nil {
		for _, s := range Settings() {
			v := f.values[s.Key]
			if v == nil || !f.fs.Changed(s.Flag) {
				continue
			}
			for _, val := range v.values {
				if err := c.Set(s.Key, val, "--"+s.Flag); err != nil {
					return Config{}, err
				}
			}
		}
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// Load reads the configuration with no flags: defaults, the file named by
// $IMAGE_RESOLVER_CONFIG, the registries file named by
// $IMAGE_RESOLVER_REGISTRIES_CONFIG, then the environment (generate).
func Load(lookup func(string) (string, bool)) (Config, error) {
	var f *Flags
	return f.Load(lookup)
}

package cache

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
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
		keys = append(keys, s.Key)
	}
	return append(keys, "registries")
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

// ParseFile applies YAML configuration; source names it in errors.
func (c *Config) ParseFile(source string, raw []byte) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return nil
	}
	js, err := yaml.YAMLToJSONStrict(raw)
	if err != nil {
		if bytes.Contains(raw, []byte("*")) && strings.Contains(err.Error(), "did not find expected") {
			return fmt.Errorf(`config %s: %w (a "*" must be quoted in YAML: registry: "*")`, source, err)
		}
		return fmt.Errorf("config %s: %w", source, err)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(js, &doc); err != nil {
		return fmt.Errorf("config %s: want a mapping of settings at the top level (keys: %s)", source, strings.Join(fileKeys(), ", "))
	}
	keys := make([]string, 0, len(doc))
	for k := range doc {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !slices.Contains(fileKeys(), k) {
			return fmt.Errorf("config %s: unknown key %q (accepted: %s)", source, k, strings.Join(fileKeys(), ", "))
		}
	}
	for _, k := range keys {
		v := doc[k]
		field := source + ": " + k
		switch k {
		case "registries":
			regs, err := resolve.ParseRegistries(source, append(append([]byte(`{"registries":`), v...), '}'))
			if err != nil {
				return err
			}
			c.Registries = regs
		case "rateLimits":
			if err := c.parseRateLimits(field, v); err != nil {
				return err
			}
		default:
			s, err := scalar(v)
			if err != nil {
				return &resolve.InputError{Field: field, Value: string(v), Accepted: "a single value", Err: err}
			}
			if err := c.Set(k, s, field); err != nil {
				return err
			}
		}
	}
	return nil
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

func (c *Config) parseRateLimits(field string, v json.RawMessage) error {
	var items []json.RawMessage
	if err := json.Unmarshal(v, &items); err != nil {
		return &resolve.InputError{Field: field, Value: string(v), Accepted: `a list of {registry, rps, burst}, e.g. [{registry: docker.io, rps: 2, burst: 10}, {registry: "*", rps: 100}]`}
	}
	var out []RateLimit
	for i, it := range items {
		f := fmt.Sprintf("%s[%d]", field, i)
		dec := json.NewDecoder(bytes.NewReader(it))
		dec.DisallowUnknownFields()
		var rl RateLimit
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
		if slices.ContainsFunc(out, func(x RateLimit) bool { return x.Registry == rl.Registry }) {
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
	return nil
}

// ---- flags ----

// Flags binds the daemon's flags (every Setting, plus --config and
// --registries-config) to a flag set, for serve and sidecar.
type Flags struct {
	fs         *pflag.FlagSet
	values     map[string]*string
	lists      map[string]*[]string
	config     *string
	registries *string
}

// AddFlags adds the daemon's flags to fs.
func AddFlags(fs *pflag.FlagSet) *Flags {
	f := &Flags{fs: fs, values: map[string]*string{}, lists: map[string]*[]string{}}
	def := DefaultConfig()
	for _, s := range Settings() {
		usage := fmt.Sprintf("%s (env %s)", s.Usage, s.Env)
		if s.List {
			f.lists[s.Key] = fs.StringArray(s.Flag, nil, usage+" (default "+s.get(&def)+")")
			continue
		}
		f.values[s.Key] = fs.String(s.Flag, s.get(&def), usage)
	}
	f.config = fs.String("config", "", "YAML configuration file (env "+ConfigEnv+"); flags and env override it")
	f.registries = fs.String("registries-config", "", "registries configuration file (env "+RegistriesConfigEnv+"), instead of registries: in --config")
	return f
}

// Load builds the configuration: defaults, then the file (--config, else
// $IMAGE_RESOLVER_CONFIG), then the environment, then the flags given on the command
// line; then it validates it.
func (f *Flags) Load(lookup func(string) (string, bool)) (Config, error) {
	if lookup == nil {
		lookup = os.LookupEnv
	}
	c := DefaultConfig()
	file := *f.config
	if !f.fs.Changed("config") {
		file, _ = lookup(ConfigEnv)
	}
	if file != "" {
		if err := c.LoadFile(file); err != nil {
			return Config{}, err
		}
	}
	regFile, regField := *f.registries, "--registries-config"
	if !f.fs.Changed("registries-config") {
		regFile, _ = lookup(RegistriesConfigEnv)
		regField = RegistriesConfigEnv
	}
	if regFile != "" {
		if len(c.Registries) > 0 {
			return Config{}, &resolve.InputError{Field: regField, Value: regFile,
				Accepted: fmt.Sprintf("registries in one place: %s already has registries:", file)}
		}
		regs, err := resolve.LoadRegistries(regFile)
		if err != nil {
			return Config{}, err
		}
		c.Registries = regs
	}
	if err := c.ApplyEnv(lookup); err != nil {
		return Config{}, err
	}
	for _, s := range Settings() {
		if !f.fs.Changed(s.Flag) {
			continue
		}
		vals := []string{}
		if s.List {
			vals = *f.lists[s.Key]
		} else {
			vals = append(vals, *f.values[s.Key])
		}
		for _, v := range vals {
			if err := c.Set(s.Key, v, "--"+s.Flag); err != nil {
				return Config{}, err
			}
		}
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

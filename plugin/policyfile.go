package plugin

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"gopkg.in/yaml.v3"

	"github.com/argocd-image-resolver/argocd-image-resolver/internal/oneline"
	"github.com/argocd-image-resolver/argocd-image-resolver/internal/yamlerr"
	"github.com/argocd-image-resolver/argocd-image-resolver/pin"
	"github.com/argocd-image-resolver/argocd-image-resolver/resolve"
)

// PolicyFileName is the optional policy file in the application directory.
const PolicyFileName = ".argocd-image-resolver.yaml"

// maxPolicyFileSize bounds what is read; a policy file is a few hundred bytes.
const maxPolicyFileSize = 1 << 20

// fileImageKeys are the keys of images.<alias>, in documentation order.
var fileImageKeys = []string{"image", "strategy", "constraint", "allowTags", "ignoreTags", "platforms", "pinDigest", "verify"}

// fileImage is one images.<alias> entry of the policy file.
type fileImage struct {
	alias string // normalised
	key   string // the key as written, for key paths
	line  int
	vals  [numFields]value
}

// policyFile is a parsed policy file; images by normalised alias.
type policyFile struct {
	images map[string]*fileImage
	// pinMode, pinTarget, pinBranch, pinPush and pinPRGroup are the top-level
	// pin settings.
	pinMode, pinTarget, pinBranch value
	pinPush, pinPRGroup           value
}

// fileTopKeys are the policy file's top-level keys.
var fileTopKeys = []string{"images", "pinMode", "pinTarget", "pinBranch", "pinPush", "pinPRGroup"}

// fileChoices are the values each top-level key that takes one of a few accepts.
var fileChoices = map[string][]string{
	"pinMode":    {PinOff, PinWrite, PinUse},
	"pinPush":    {PinPushDirect, PinPushPullRequest},
	"pinPRGroup": {PinPRGroupApp, PinPRGroupRepository},
}

// readPolicyFile reads the policy file of appDir, confined to repoRoot (the
// repository checkout; "" means appDir itself): a policy file that is a symbolic
// link may lead anywhere inside the checkout (a shared file of the repository) but
// never outside it, and a special file is refused without blocking. A missing file
// gives (nil, nil).
func readPolicyFile(repoRoot, appDir string) (*policyFile, error) {
	if _, err := os.Lstat(filepath.Join(appDir, ".argocd-image-resolver.yml")); err == nil {
		return nil, fmt.Errorf("file .argocd-image-resolver.yml: the policy file must be named %s; rename it", PolicyFileName)
	}
	lst, err := os.Lstat(filepath.Join(appDir, PolicyFileName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("file %s: %v", PolicyFileName, relErr(err))
	}
	f, err := openConfined(repoRoot, appDir, PolicyFileName)
	if err != nil {
		if lst.Mode()&fs.ModeSymlink != 0 {
			if errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("file %s: a symbolic link to a file that does not exist", PolicyFileName)
			}
			return nil, fmt.Errorf("file %s: a symbolic link that is absolute or leads outside the repository checkout, refused (links within the repository must be relative)", PolicyFileName)
		}
		return nil, fmt.Errorf("file %s: %v", PolicyFileName, relErr(err))
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil {
		return nil, fmt.Errorf("file %s: %v", PolicyFileName, relErr(err))
	} else if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("file %s: not a regular file, refused", PolicyFileName)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxPolicyFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("file %s: %v", PolicyFileName, relErr(err))
	}
	if len(data) > maxPolicyFileSize {
		return nil, fmt.Errorf("file %s: larger than %d bytes", PolicyFileName, maxPolicyFileSize)
	}
	return parsePolicyFile(data)
}

// openConfined opens appDir/name for reading through an os.Root at repoRoot, so
// symbolic links are followed only while they stay inside it; non-blocking, so a
// named pipe in its place cannot hold the render.
func openConfined(repoRoot, appDir, name string) (*os.File, error) {
	if repoRoot == "" {
		repoRoot = appDir
	}
	absRoot, err := filepath.Abs(repoRoot)
	if err != nil {
		return nil, err
	}
	absDir, err := filepath.Abs(appDir)
	if err != nil {
		return nil, err
	}
	rel, err := filepath.Rel(absRoot, absDir)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return nil, fmt.Errorf("application directory is not inside the repository root")
	}
	root, err := os.OpenRoot(absRoot)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	return root.OpenFile(filepath.Join(rel, name), os.O_RDONLY|syscall.O_NONBLOCK, 0)
}

// RepoRoot finds the repository checkout from the application directory and the
// app's path in the repository (ARGOCD_APP_SOURCE_PATH): Argo CD extracts the whole
// repository and runs the plugin in <root>/<path>. Without a path, or when appDir
// does not end in it, the application directory is the root.
func RepoRoot(appDir, sourcePath string) string {
	clean := filepath.Clean(sourcePath)
	if sourcePath == "" || clean == "." || clean == "/" {
		return appDir
	}
	if strings.HasSuffix(appDir, string(os.PathSeparator)+clean) {
		return strings.TrimSuffix(appDir, string(os.PathSeparator)+clean)
	}
	return appDir
}

// relErr drops the absolute path (a random work directory) from a file error, so that
// messages are the same on every render.
func relErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// parsePolicyFile parses the policy file strictly: every key must be known, every
// value of the right shape. Values are checked later, with the parameters.
func parsePolicyFile(data []byte) (*policyFile, error) {
	pf := &policyFile{images: map[string]*fileImage{}}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return pf, nil
		}
		return nil, syntaxError(data, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, syntaxError(data, err)
		}
		return nil, joinLines([]error{fmt.Errorf("file %s (line %d): more than one YAML document (accepted: one document with key images)", PolicyFileName, extra.Line)})
	}
	root := &doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return pf, nil
		}
		root = root.Content[0]
	}
	var errs []error
	p := fileParser{errs: &errs}
	if isNullNode(root) {
		return pf, nil
	}
	if !p.mapping(root, "", "a mapping with keys "+strings.Join(fileTopKeys, ", ")) {
		return nil, joinLines(errs)
	}
	p.pairs(root, "", fileTopKeys, func(key string, k, v *yaml.Node) {
		if key != "images" {
			if isNullNode(v) {
				return
			}
			p.pinSetting(pf, key, v)
			return
		}
		if isNullNode(v) || !p.mapping(v, "images", "a mapping of alias to image policy") {
			return
		}
		p.pairs(v, "images", nil, func(aliasKey string, k, v *yaml.Node) {
			alias := normaliseAlias(aliasKey)
			path := "images." + aliasKey
			if err := checkAlias(alias); err != nil {
				p.fail(k, path, "invalid alias: %v (accepted: %s)", err, aliasAccepted)
				return
			}
			if prev, dup := pf.images[alias]; dup {
				p.fail(k, path, "alias %q is the same as images.%s (line %d) (accepted: unique aliases; / is read as _)", alias, prev.key, prev.line)
				return
			}
			fi := &fileImage{alias: alias, key: aliasKey, line: k.Line}
			pf.images[alias] = fi
			if isNullNode(v) || !p.mapping(v, path, "a mapping with keys "+strings.Join(fileImageKeys, ", ")) {
				return
			}
			p.pairs(v, path, fileImageKeys, func(key string, k, v *yaml.Node) {
				p.imageField(fi, path+"."+key, key, v)
			})
		})
	})
	if len(errs) > 0 {
		return nil, joinLines(errs)
	}
	return pf, nil
}

// syntaxError is the policy file's YAML syntax error, at the line and column of
// the problem (yaml.v3 names the enclosing block's line): bad input, as every
// other problem of the file.
func syntaxError(data []byte, err error) error {
	if loc := yamlerr.Locate(data, err); loc != nil {
		return joinLines([]error{fmt.Errorf("file %s%s: YAML syntax: %s", PolicyFileName, loc.Where(), oneline.Fold(loc.Problem))})
	}
	return joinLines([]error{fmt.Errorf("file %s: %s", PolicyFileName, oneline.Fold(err.Error()))})
}

type fileParser struct{ errs *[]error }

// pinSetting reads one of the top-level pin settings (pinMode, pinTarget,
// pinBranch, pinPush, pinPRGroup).
func (p fileParser) pinSetting(pf *policyFile, key string, v *yaml.Node) {
	accepted := map[string]string{"pinMode": pinModeAccepted, "pinTarget": pin.TargetAccepted, "pinBranch": pinBranchAccepted,
		"pinPush": pinPushAccepted, "pinPRGroup": pinPRGroupAccepted}[key]
	if v.Kind != yaml.ScalarNode {
		p.fail(v, key, "is %s (accepted: %s)", describeNode(v), accepted)
		return
	}
	val := value{set: true, str: strings.TrimSpace(v.Value), src: "file " + PolicyFileName + " key " + key, line: v.Line}
	if choices, ok := fileChoices[key]; ok && !slices.Contains(choices, val.str) {
		p.fail(v, key, "invalid value %q (accepted: %s)", v.Value, accepted)
		return
	}
	switch key {
	case "pinMode":
		pf.pinMode = val
	case "pinTarget":
		pf.pinTarget = val
	case "pinBranch":
		pf.pinBranch = val
	case "pinPush":
		pf.pinPush = val
	case "pinPRGroup":
		pf.pinPRGroup = val
	}
}

func (p fileParser) fail(n *yaml.Node, path, format string, args ...any) {
	where := "file " + PolicyFileName
	if path != "" {
		where += " key " + path
	}
	if n != nil && n.Line > 0 {
		where += fmt.Sprintf(" (line %d)", n.Line)
	}
	*p.errs = append(*p.errs, fmt.Errorf("%s: %s", where, fmt.Sprintf(format, args...)))
}

func (p fileParser) mapping(n *yaml.Node, path, accepted string) bool {
	if n.Kind == yaml.AliasNode {
		p.fail(n, path, "YAML aliases are not supported (accepted: %s)", accepted)
		return false
	}
	if n.Kind != yaml.MappingNode {
		p.fail(n, path, "is %s (accepted: %s)", describeNode(n), accepted)
		return false
	}
	return true
}

// pairs walks a mapping's keys; with known non-nil, unknown keys are errors.
// Duplicate keys are errors.
func (p fileParser) pairs(m *yaml.Node, path string, known []string, fn func(key string, k, v *yaml.Node)) {
	seen := map[string]int{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if k.Kind != yaml.ScalarNode || isNullNode(k) {
			p.fail(k, path, "a key is %s (accepted: string keys)", describeNode(k))
			continue
		}
		kp := joinPath(path, k.Value)
		if line, dup := seen[k.Value]; dup {
			p.fail(k, kp, "duplicate key (first at line %d)", line)
			continue
		}
		seen[k.Value] = k.Line
		if known != nil && !slices.Contains(known, k.Value) {
			p.fail(k, kp, "unknown key%s (accepted: %s)", suggest(k.Value, known), strings.Join(known, ", "))
			continue
		}
		fn(k.Value, k, v)
	}
}

func (p fileParser) imageField(fi *fileImage, path, key string, v *yaml.Node) {
	src := "file " + PolicyFileName + " key " + path
	if v.Kind == yaml.AliasNode {
		p.fail(v, path, "YAML aliases are not supported")
		return
	}
	if isNullNode(v) {
		return // an empty value leaves the field unset
	}
	if key == "verify" {
		p.verifyField(fi, path, v)
		return
	}
	val := value{set: true, src: src, line: v.Line}
	switch key {
	case "image", "strategy", "constraint", "allowTags":
		if v.Kind != yaml.ScalarNode {
			p.fail(v, path, "is %s (accepted: a string)", describeNode(v))
			return
		}
		val.str = v.Value
	case "ignoreTags", "platforms":
		switch v.Kind {
		case yaml.ScalarNode:
			val.list = []string{v.Value}
		case yaml.SequenceNode:
			val.list = []string{}
			for _, item := range v.Content {
				if item.Kind != yaml.ScalarNode || isNullNode(item) {
					p.fail(item, path, "an item is %s (accepted: a list of strings, or one comma-separated string)", describeNode(item))
					return
				}
				val.list = append(val.list, item.Value)
			}
		default:
			p.fail(v, path, "is %s (accepted: a list of strings, or one comma-separated string)", describeNode(v))
			return
		}
	case "pinDigest":
		b, ok := parseBool(v.Value)
		if v.Kind != yaml.ScalarNode || !ok {
			p.fail(v, path, "invalid value %q (accepted: true or false)", nodeText(v))
			return
		}
		val.b = b
	}
	switch key {
	case "image":
		repo, written, constraint, err := resolve.ParseImageSpec(v.Value)
		if err != nil {
			*p.errs = append(*p.errs, resolve.WithField(err, val.label()))
			return
		}
		val.str, val.repo = written, repo
		fi.vals[fImage] = val
		if constraint != "" {
			if fi.vals[fConstraint].set {
				p.fail(v, path, "a constraint is given both here (%q) and in key %s.constraint (accepted: the constraint in one place)", constraint, strings.TrimSuffix(path, ".image"))
				return
			}
			fi.vals[fConstraint] = value{set: true, str: constraint, src: src, line: v.Line}
		}
	case "constraint":
		if c := fi.vals[fConstraint]; c.set {
			p.fail(v, path, "a constraint is given both here (%q) and in key %s.image (accepted: the constraint in one place)", v.Value, strings.TrimSuffix(path, ".constraint"))
			return
		}
		fi.vals[fConstraint] = val
	case "strategy":
		fi.vals[fStrategy] = val
	case "allowTags":
		fi.vals[fAllow] = val
	case "ignoreTags":
		fi.vals[fIgnore] = val
	case "platforms":
		fi.vals[fPlatforms] = val
	case "pinDigest":
		fi.vals[fPinDigest] = val
	}
}

// isNullNode and describeNode are for gopkg.in/yaml.v3 nodes, worded for the
// policy file ("the scalar \"1\"", "empty"); render and pin read kyaml's nodes, a
// different type, with internal/yamlnode.
func isNullNode(n *yaml.Node) bool {
	return n == nil || n.Kind == 0 || (n.Kind == yaml.ScalarNode && n.Tag == "!!null")
}

func describeNode(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "a YAML alias"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "empty"
		}
		return fmt.Sprintf("the scalar %q", n.Value)
	}
	return "empty"
}

func nodeText(n *yaml.Node) string {
	if n.Kind == yaml.ScalarNode {
		return n.Value
	}
	return describeNode(n)
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

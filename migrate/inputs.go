package migrate

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// DefaultMaxInput is the default bound on what migrate reads, all its inputs
// together (--max-input): far above any real argocd-image-updater
// configuration, far below what its YAML parse would take to exhaust memory.
const DefaultMaxInput = 16 << 20

// ErrInputTooLarge is wrapped by the error of inputs over the bound.
var ErrInputTooLarge = errors.New("over the bound on migrate's input")

// InputExts are the file names a directory given to ReadInputs is read for.
var InputExts = []string{".yaml", ".yml", ".json"}

// ReadInputs reads the inputs named by args: a file; a directory (its files
// named *.yaml, *.yml or *.json, in its subdirectories too but not hidden ones
// such as .git, in lexical order); or "-" for stdin, also when args is empty.
// All of them together are read up to maxInput bytes (DefaultMaxInput when
// maxInput <= 0): a file that says it is larger is refused before it is read,
// a stream past the bound as soon as it passes it. Errors are *InputError.
func ReadInputs(stdin io.Reader, args []string, maxInput int64) ([]Input, error) {
	if maxInput <= 0 {
		maxInput = DefaultMaxInput
	}
	if len(args) == 0 {
		args = []string{"-"}
	}
	r := &inputReader{max: maxInput}
	var inputs []Input
	for _, a := range args {
		in, err := r.arg(stdin, a)
		if err != nil {
			return nil, err
		}
		inputs = append(inputs, in...)
	}
	return inputs, nil
}

// inputReader reads inputs while the bytes they hold together stay within max.
type inputReader struct {
	max, total int64
}

func (r *inputReader) arg(stdin io.Reader, a string) ([]Input, error) {
	if a == "-" {
		in, err := r.read(a, stdin, 0)
		return []Input{in}, err
	}
	st, err := os.Stat(a)
	if err != nil {
		return nil, &InputError{Input: a, Err: fmt.Errorf("read: %w", err)}
	}
	if !st.IsDir() {
		in, err := r.file(a)
		return []Input{in}, err
	}
	var inputs []Input
	err = filepath.WalkDir(a, func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return &InputError{Input: p, Err: fmt.Errorf("read: %w", err)}
		case d.IsDir() && p != a && strings.HasPrefix(d.Name(), "."):
			return filepath.SkipDir
		case d.IsDir() || !d.Type().IsRegular() && d.Type()&fs.ModeSymlink == 0 || !hasInputExt(p):
			return nil
		}
		in, err := r.file(p)
		inputs = append(inputs, in)
		return err
	})
	return inputs, err
}

func hasInputExt(p string) bool {
	for _, ext := range InputExts {
		if strings.EqualFold(filepath.Ext(p), ext) {
			return true
		}
	}
	return false
}

func (r *inputReader) file(p string) (Input, error) {
	f, err := os.Open(p)
	if err != nil {
		return Input{}, &InputError{Input: p, Err: fmt.Errorf("read: %w", err)}
	}
	defer f.Close()
	var size int64
	if st, err := f.Stat(); err == nil && st.Mode().IsRegular() {
		size = st.Size()
	}
	return r.read(p, f, size)
}

// read reads one input of size bytes (0 when unknown: a pipe, a device).
func (r *inputReader) read(name string, src io.Reader, size int64) (Input, error) {
	left := r.max - r.total
	if size > left {
		return Input{}, r.tooLarge(name, fmt.Sprintf("is %s", bytesText(size)), r.total+size)
	}
	b, err := io.ReadAll(io.LimitReader(src, left+1))
	if err != nil {
		return Input{}, &InputError{Input: name, Err: fmt.Errorf("read: %w", err)}
	}
	if int64(len(b)) > left {
		return Input{}, r.tooLarge(name, fmt.Sprintf("goes on past %s", bytesText(left)), 0)
	}
	r.total += int64(len(b))
	return Input{Name: name, Data: b}, nil
}

func (r *inputReader) tooLarge(name, what string, need int64) error {
	before := ""
	if r.total > 0 {
		before = fmt.Sprintf(", after %s of the inputs before it", bytesText(r.total))
	}
	if name == "-" {
		name = "- (stdin)"
	}
	suggest := max(2*r.max, need) + 1<<20 - 1
	return &InputError{Input: name, Err: fmt.Errorf("%s%s: %w: at most %s for all inputs together (raise it with --max-input SIZE, e.g. --max-input %dMiB)",
		what, before, ErrInputTooLarge, bytesText(r.max), suggest>>20)}
}

// bytesText is n in bytes, and in MiB from 1 MiB on.
func bytesText(n int64) string {
	if n < 1<<20 {
		return fmt.Sprintf("%d bytes", n)
	}
	return fmt.Sprintf("%d bytes (%.1f MiB)", n, float64(n)/(1<<20))
}

package migrate

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// zeros is an endless stream that counts what was taken from it.
type zeros struct{ taken int64 }

func (z *zeros) Read(p []byte) (int, error) {
	clear(p)
	z.taken += int64(len(p))
	return len(p), nil
}

func writeFile(t *testing.T, p string, size int64) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("kind: ConfigMap\n"); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil { // sparse past the first line
		t.Fatal(err)
	}
}

func TestReadInputsBound(t *testing.T) {
	dir := t.TempDir()
	for p, size := range map[string]int64{
		"big.yaml": 200e6, "a.yaml": 600 << 10, "b.yaml": 600 << 10,
		"tree/1.yaml": 100, "tree/sub/2.yml": 100, "tree/3.json": 100, "tree/README.md": 100,
		"tree/.git/x.yaml": 100, "tree/4.YAML": 100, "over/a.yaml": 600 << 10, "over/b.yaml": 600 << 10,
	} {
		writeFile(t, filepath.Join(dir, p), size)
	}
	in := func(ps ...string) (out []string) {
		for _, p := range ps {
			out = append(out, filepath.Join(dir, p))
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		args    []string
		stdin   bool // an endless stdin
		max     int64
		want    []string // inputs read
		wantErr []string // in the error
	}{
		{name: "200 MB file", args: in("big.yaml"), max: DefaultMaxInput,
			wantErr: []string{"big.yaml: is 200000000 bytes", "at most 16777216 bytes", "--max-input"}},
		{name: "endless stdin", stdin: true, max: DefaultMaxInput,
			wantErr: []string{"- (stdin): goes on past 16777216 bytes", "at most 16777216 bytes", "--max-input"}},
		{name: "files over in all", args: in("a.yaml", "b.yaml"), max: 1 << 20,
			wantErr: []string{"b.yaml: is 614400 bytes, after 614400 bytes of the inputs before it", "at most 1048576 bytes (1.0 MiB) for all inputs together", "--max-input 2MiB"}},
		{name: "directory over in all", args: in("over"), max: 1 << 20,
			wantErr: []string{filepath.Join("over", "b.yaml") + ": is 614400 bytes, after 614400 bytes", "--max-input"}},
		{name: "file then endless stdin", args: append(in("a.yaml"), "-"), stdin: true, max: 1 << 20,
			wantErr: []string{"- (stdin): goes on past 434176 bytes, after 614400 bytes of the inputs before it", "--max-input"}},
		{name: "directory within", args: in("tree"), max: 1 << 20,
			want: in("tree/1.yaml", "tree/3.json", "tree/4.YAML", "tree/sub/2.yml")},
		{name: "raised bound", args: in("a.yaml", "b.yaml"), max: 2 << 20, want: in("a.yaml", "b.yaml")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdin zeros
			var r io.Reader = strings.NewReader("")
			if tc.stdin {
				r = &stdin
			}
			start := time.Now()
			got, err := ReadInputs(r, tc.args, tc.max)
			took := time.Since(start)
			var names []string
			for _, g := range got {
				names = append(names, g.Name)
			}
			if tc.wantErr == nil {
				if err != nil || !slices.Equal(names, tc.want) {
					t.Errorf("ReadInputs = %q, %v; want %q", names, err, tc.want)
				}
				return
			}
			var ie *InputError
			if !errors.As(err, &ie) || !errors.Is(err, ErrInputTooLarge) {
				t.Fatalf("ReadInputs: %v; want an *InputError wrapping ErrInputTooLarge", err)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q: want it to say %q", err, w)
				}
			}
			if stdin.taken > tc.max+1<<20 || took > 5*time.Second {
				t.Errorf("took %d bytes of stdin in %v; want at most the bound and a buffer, within 5 s", stdin.taken, took)
			}
		})
	}
}

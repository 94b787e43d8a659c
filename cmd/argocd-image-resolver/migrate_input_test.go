package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// endless is a stream of newlines that is never held whole.
type endless struct{}

func (endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = '\n'
	}
	return len(p), nil
}

// migrate refuses a 200 MB input, a file or a pipe, within 5 s, naming the
// input, its size, the bound and the flag that raises it.
func TestMigrateMaxInput(t *testing.T) {
	big := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(big, []byte("kind: ConfigMap\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(big, 200e6); err != nil { // sparse
		t.Fatal(err)
	}
	testdata, err := filepath.Abs("../../testdata/migrate")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		args  []string
		stdin io.Reader
		code  int
		want  []string // in stderr
	}{
		{name: "200 MB file", args: []string{big}, code: exitInput,
			want: []string{big + ": is 200000000 bytes", "at most 16777216 bytes (16.0 MiB)", "--max-input"}},
		{name: "200 MB pipe", args: []string{"-"}, stdin: io.LimitReader(endless{}, 200e6), code: exitInput,
			want: []string{"- (stdin): goes on past 16777216 bytes", "at most 16777216 bytes (16.0 MiB)", "--max-input"}},
		{name: "directory over a lowered bound", args: []string{"--max-input", "4KiB", testdata}, code: exitInput,
			want: []string{testdata + "/", "at most 4096 bytes for all inputs together", "--max-input"}},
		{name: "directory within the bound", args: []string{testdata}, code: 0},
		{name: "bad bound", args: []string{"--max-input", "lots", big}, code: exitInput,
			want: []string{`invalid argument "lots" for "--max-input"`, "512KiB, 64MiB, 1GiB"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(binary, append([]string{"migrate"}, tc.args...)...)
			cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
			cmd.Stdin = tc.stdin
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			start := time.Now()
			err := cmd.Run()
			took := time.Since(start)
			t.Logf("%s: exit after %v", tc.name, took.Round(time.Millisecond))
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tc.code || took > 5*time.Second {
				t.Errorf("exit %d after %v, stderr %q; want %d within 5 s", code, took, stderr.String(), tc.code)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr %q: want it to say %q", stderr.String(), w)
				}
			}
		})
	}
}

package image

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	line int
	cmd  string // upper case
	args string
}

// parseDockerfile splits a Dockerfile into instructions: comments and blank lines
// dropped, lines ending in a backslash joined (comment lines inside them dropped, as
// Docker does).
func parseDockerfile(data string) ([]instruction, error) {
	var (
		out     []instruction
		cur     strings.Builder
		startAt int
	)
	for i, raw := range strings.Split(data, "\n") {
		line := strings.TrimSpace(raw)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if cur.Len() == 0 {
			startAt = i + 1
		}
		if cont, ok := strings.CutSuffix(line, `\`); ok {
			cur.WriteString(cont + " ")
			continue
		}
		cur.WriteString(line)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		out = append(out, instruction{line: startAt, cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args)})
		cur.Reset()
	}
	if cur.Len() > 0 {
		return nil, fmt.Errorf("line %d: continuation at the end of the file", startAt)
	}
	return out, nil
}

// stage is one FROM and the instructions after it.
type stage struct {
	from, name string
	ins        []instruction
}

func stages(ins []instruction) ([]stage, error) {
	var out []stage
	for _, in := range ins {
		if in.cmd == "FROM" {
			f := strings.Fields(in.args)
			s := stage{from: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				s.name = f[2]
			} else if len(f) != 1 {
				return nil, fmt.Errorf("line %d: FROM %s: want IMAGE [AS NAME]", in.line, in.args)
			}
			out = append(out, s)
			continue
		}
		if len(out) == 0 {
			if in.cmd == "ARG" {
				continue
			}
			return nil, fmt.Errorf("line %d: %s before FROM", in.line, in.cmd)
		}
		out[len(out)-1].ins = append(out[len(out)-1].ins, in)
	}
	return out, nil
}

// keyValues parses ENV and LABEL arguments: KEY=VALUE pairs separated by spaces (the
// Dockerfile uses no quotes), ${NAME} expanded from vars.
func keyValues(in instruction, vars map[string]string) ([][2]string, error) {
	var out [][2]string
	for _, f := range strings.Fields(in.args) {
		k, v, ok := strings.Cut(f, "=")
		if !ok || strings.ContainsAny(v, `"'`) {
			return nil, fmt.Errorf("line %d: %s %s: this test reads only unquoted KEY=VALUE pairs", in.line, in.cmd, f)
		}
		v = os.Expand(v, func(name string) string { return vars[name] })
		out = append(out, [2]string{k, v})
	}
	return out, nil
}

// TestDockerfileAgrees checks that the Dockerfile, which users with Docker build,
// gives the image make image gives: the same files with the same owners, modes and
// contents, user, entrypoint, working directory, environment and labels. No Docker
// engine runs here, so the test does what each instruction does: it runs the build
// stage's commands (build-image -rootfs itself; the go build by checking its flags and
// using binaries built with them) and applies the final stage's COPY --from as
// BuildKit does (a directory's contents, owners and modes kept unless --chown or
// --chmod).
func TestDockerfileAgrees(t *testing.T) {
	root := moduleRoot(t)
	data, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	ins, err := parseDockerfile(string(data))
	if err != nil {
		t.Fatal(err)
	}
	st, err := stages(ins)
	if err != nil {
		t.Fatal(err)
	}
	if len(st) < 2 {
		t.Fatalf("%d stages, want a build stage and the image", len(st))
	}
	final := st[len(st)-1]
	if final.from != "scratch" {
		// Another base brings files this test cannot see (and make image does not have).
		t.Fatalf("the image stage is FROM %s, want scratch", final.from)
	}
	buildArgs := map[string]string{"VERSION": testVersion, "COMMIT": testRevision}

	// The build stages' file systems, each a directory here.
	stageFS := map[string]string{}
	for _, s := range st[:len(st)-1] {
		dir := t.TempDir()
		stageFS[s.name] = dir
		runBuildStage(t, root, s, dir)
	}

	// The image stage.
	img := t.TempDir()
	var (
		user, workdir string
		entrypoint    []string
		// BuildKit gives a scratch stage a default PATH; ENV replaces it in place.
		env    = [][2]string{{"PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}}
		labels = map[string]string{}
		vars   = map[string]string{}
	)
	for _, in := range final.ins {
		switch in.cmd {
		case "ARG":
			name, def, _ := strings.Cut(in.args, "=")
			if v, ok := buildArgs[name]; ok {
				vars[name] = v
			} else {
				vars[name] = def
			}
		case "COPY":
			dockerCopy(t, in, stageFS, img)
		case "USER":
			user = in.args
		case "WORKDIR":
			workdir = in.args
		case "ENV":
			kvs, err := keyValues(in, vars)
			if err != nil {
				t.Fatal(err)
			}
			for _, kv := range kvs {
				if i := slices.IndexFunc(env, func(e [2]string) bool { return e[0] == kv[0] }); i >= 0 {
					env[i] = kv
				} else {
					env = append(env, kv)
				}
			}
		case "LABEL":
			kvs, err := keyValues(in, vars)
			if err != nil {
				t.Fatal(err)
			}
			for _, kv := range kvs {
				labels[kv[0]] = kv[1]
			}
		case "ENTRYPOINT":
			// The exec form: the shell form needs /bin/sh, which the image has not.
			if err := json.Unmarshal([]byte(in.args), &entrypoint); err != nil {
				t.Fatalf("line %d: ENTRYPOINT %s is not the exec (JSON) form: %v", in.line, in.args, err)
			}
		default:
			t.Fatalf("line %d: %s in the image stage: teach TestDockerfileAgrees what it does", in.line, in.cmd)
		}
	}

	// The image make image builds, from the same binaries.
	built := testImage(t)
	cf, err := built.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	var envList []string
	for _, kv := range env {
		envList = append(envList, kv[0]+"="+kv[1])
	}
	for _, c := range []struct {
		what      string
		got, want any
	}{
		{"USER", user, cf.Config.User},
		{"WORKDIR", workdir, cf.Config.WorkingDir},
		{"ENTRYPOINT", entrypoint, cf.Config.Entrypoint},
		{"ENV", envList, cf.Config.Env},
		{"LABEL", labels, cf.Config.Labels},
	} {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("Dockerfile %s %v, make image's %v", c.what, c.got, c.want)
		}
	}

	got, err := readTree(img)
	if err != nil {
		t.Fatal(err)
	}
	want, contents := filesOf(t, built, func(string) bool { return true })
	for _, p := range sortedKeys(want) {
		if g, ok := got[p]; !ok {
			t.Errorf("%s: in make image's image, not in the Dockerfile's", p)
		} else if g != want[p] {
			t.Errorf("%s: Dockerfile's %v, make image's %v", p, g, want[p])
		} else if want[p].Type != tar.TypeDir {
			b, err := os.ReadFile(filepath.Join(img, filepath.FromSlash(p)))
			if err != nil {
				t.Fatal(err)
			}
			if sha256.Sum256(b) != sha256.Sum256(contents[p]) {
				t.Errorf("%s: contents differ", p)
			}
		}
	}
	for _, p := range sortedKeys(got) {
		if _, ok := want[p]; !ok {
			t.Errorf("%s: in the Dockerfile's image, not in make image's", p)
		}
	}
}

// runBuildStage does what the build stage's RUN instructions do, into dir (the
// stage's root): the commands it knows, each checked.
func runBuildStage(t *testing.T, root string, s stage, dir string) {
	t.Helper()
	wrote := map[string]bool{}
	for _, in := range s.ins {
		if in.cmd != "RUN" {
			continue // FROM's toolchain, WORKDIR, COPY of the sources, ARG: no file of the image
		}
		f := strings.Fields(in.args)
		switch {
		case slices.Equal(f, []string{"go", "mod", "download"}):
		case len(f) == 5 && slices.Equal(f[:4], []string{"go", "run", "./cmd/build-image", "-rootfs"}):
			// The real command, with the stage's path moved under dir.
			out := filepath.Join(dir, filepath.FromSlash(f[4]))
			cmd := exec.Command("go", "run", "./cmd/build-image", "-rootfs", out)
			cmd.Dir = root
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("line %d: %s: %v\n%s", in.line, cmd, err, b)
			}
			wrote["rootfs"] = true
		case slices.Contains(f, "build") && slices.Contains(f, "go"):
			outDir := checkGoBuild(t, in, f)
			bins := staticBinaries(t)
			for _, b := range Binaries {
				src, err := os.ReadFile(filepath.Join(bins, b))
				if err != nil {
					t.Fatal(err)
				}
				p := filepath.Join(dir, filepath.FromSlash(outDir), b)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				// go build writes executables 0755 under Docker's umask 022.
				if err := os.WriteFile(p, src, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(p, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			wrote["binaries"] = true
		default:
			t.Fatalf("line %d: RUN %s: teach TestDockerfileAgrees what it writes", in.line, in.args)
		}
	}
	if len(wrote) != 2 {
		t.Fatalf("stage %s: want a RUN of build-image -rootfs and a go build of the binaries; found %v", s.name, wrote)
	}
}

// checkGoBuild checks that the go build builds Binaries as make image does (static,
// trimmed, stamped) and returns its -o directory.
func checkGoBuild(t *testing.T, in instruction, f []string) string {
	t.Helper()
	var (
		env, pkgs     []string
		out, ldflags  string
		trimpath, cmd bool
	)
	for i := 0; i < len(f); i++ {
		a := f[i]
		switch {
		case !cmd && strings.Contains(a, "="):
			env = append(env, a)
		case a == "go" || a == "build":
			cmd = true
		case a == "-trimpath":
			trimpath = true
		case a == "-o" && i+1 < len(f):
			i++
			out = f[i]
		case strings.HasPrefix(a, "-ldflags="):
			// -ldflags="-s -w -X ..." was split on spaces: join up to the closing quote.
			ldflags = strings.TrimPrefix(a, "-ldflags=")
			for !strings.HasSuffix(ldflags, `"`) && i+1 < len(f) {
				i++
				ldflags += " " + f[i]
			}
			ldflags = strings.Trim(ldflags, `"`)
		case strings.HasPrefix(a, "./"):
			pkgs = append(pkgs, a)
		default:
			t.Fatalf("line %d: go build argument %q: teach TestDockerfileAgrees what it means", in.line, a)
		}
	}
	var wantPkgs []string
	for _, b := range Binaries {
		wantPkgs = append(wantPkgs, "./cmd/"+b)
	}
	if !slices.Contains(env, "CGO_ENABLED=0") || !trimpath || !slices.Equal(pkgs, wantPkgs) || out == "" {
		t.Errorf("line %d: go build with %v, -trimpath %v, packages %v, -o %q; want CGO_ENABLED=0 -trimpath -o DIR/ %v",
			in.line, env, trimpath, pkgs, out, wantPkgs)
	}
	for _, x := range []string{"-s", "-w", "-X main.version=${VERSION}", "-X main.commit=${COMMIT}"} {
		if !strings.Contains(" "+ldflags+" ", " "+x+" ") {
			t.Errorf("line %d: -ldflags %q lacks %q (make image's flags)", in.line, ldflags, x)
		}
	}
	return out
}

// dockerCopy applies COPY --from=STAGE [--chown=U:G] [--chmod=MODE] SRC... DEST to
// the image directory img, as BuildKit does: a file is copied to DEST (into it when
// DEST ends in /), a directory's contents are copied under DEST; owners and modes are
// kept unless --chown or --chmod; missing directories of DEST are created 0755 with
// the --chown owner (else root).
func dockerCopy(t *testing.T, in instruction, stageFS map[string]string, img string) {
	t.Helper()
	f := strings.Fields(in.args)
	var (
		from        string
		uid, gid    = -1, -1
		chmod       = fs.FileMode(0)
		paths       []string
		hasChmod    bool
		parseFailed = func(why string) { t.Fatalf("line %d: COPY %s: %s", in.line, in.args, why) }
	)
	for _, a := range f {
		switch {
		case strings.HasPrefix(a, "--from="):
			from = strings.TrimPrefix(a, "--from=")
		case strings.HasPrefix(a, "--chown="):
			u, g, ok := strings.Cut(strings.TrimPrefix(a, "--chown="), ":")
			var err1, err2 error
			uid, err1 = strconv.Atoi(u)
			gid, err2 = strconv.Atoi(g)
			if !ok || err1 != nil || err2 != nil {
				parseFailed("this test reads only numeric --chown=UID:GID")
			}
		case strings.HasPrefix(a, "--chmod="):
			m, err := strconv.ParseUint(strings.TrimPrefix(a, "--chmod="), 8, 32)
			if err != nil {
				parseFailed("this test reads only octal --chmod")
			}
			chmod, hasChmod = fs.FileMode(m), true
		case strings.HasPrefix(a, "--"):
			parseFailed("unknown flag " + a)
		default:
			paths = append(paths, a)
		}
	}
	src, ok := stageFS[from]
	if !ok {
		parseFailed("only COPY --from a build stage is known here (the build context is not the image's)")
	}
	if len(paths) < 2 {
		parseFailed("want SRC... DEST")
	}
	dest := paths[len(paths)-1]
	owner := func(info fs.FileInfo) (int, int) {
		if uid >= 0 {
			return uid, gid
		}
		st := info.Sys().(*syscall.Stat_t)
		return int(st.Uid), int(st.Gid)
	}
	place := func(from, to string) {
		info, err := os.Lstat(from)
		if err != nil {
			t.Fatal(err)
		}
		mode := info.Mode() & (fs.ModePerm | fs.ModeSticky)
		if hasChmod {
			mode = chmod
		}
		u, g := owner(info)
		if info.IsDir() {
			if err := os.MkdirAll(to, 0o700); err != nil {
				t.Fatal(err)
			}
		} else {
			b, err := os.ReadFile(from)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(to, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chmod(to, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(to, u, g); err != nil {
			t.Fatal(err)
		}
	}
	mkdirs := func(dir string) {
		rel, err := filepath.Rel(img, dir)
		if err != nil {
			t.Fatal(err)
		}
		cur := img
		for _, part := range strings.Split(rel, string(filepath.Separator)) {
			if part == "." {
				continue
			}
			cur = filepath.Join(cur, part)
			if _, err := os.Lstat(cur); err == nil {
				continue
			}
			if err := os.Mkdir(cur, 0o755); err != nil {
				t.Fatal(err)
			}
			u, g := 0, 0
			if uid >= 0 {
				u, g = uid, gid
			}
			if err := os.Lchown(cur, u, g); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, s := range paths[:len(paths)-1] {
		from := filepath.Join(src, filepath.FromSlash(s))
		info, err := os.Stat(from)
		if err != nil {
			parseFailed(fmt.Sprintf("%s is not in stage %s: %v", s, in.args, err))
		}
		if !info.IsDir() {
			to := filepath.Join(img, filepath.FromSlash(dest))
			if strings.HasSuffix(dest, "/") {
				to = filepath.Join(to, filepath.Base(s))
			}
			mkdirs(filepath.Dir(to))
			place(from, to)
			continue
		}
		base := filepath.Join(img, filepath.FromSlash(dest))
		mkdirs(base)
		err = filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
			if err != nil || p == from {
				return err
			}
			rel, err := filepath.Rel(from, p)
			if err != nil {
				return err
			}
			place(p, filepath.Join(base, rel))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// moduleRoot is the directory of go.mod above this package.
func moduleRoot(t testing.TB) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(string(bytes.TrimSpace(out)))
}

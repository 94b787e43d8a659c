package render

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"helm.sh/helm/v4/pkg/chart/loader/archive"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/ignore"
)

// loadChart is Helm 4's loader.LoadDir confined to the repository: it walks the chart
// directory as Helm does (.helmignore and its defaults, symbolic links followed, the
// chart's files together within Helm's archive.MaxDecompressedChartSize), but a link
// that leads out of the repository or a special file (named pipe, device) is refused
// instead of read.
func loadChart(dir string, b *boundary) (*chart.Chart, error) {
	rules := ignore.Empty()
	ifile := filepath.Join(dir, ignore.HelmIgnore)
	if _, err := os.Lstat(ifile); err == nil {
		data, err := b.readFile(ifile)
		if err != nil {
			return nil, err
		}
		if rules, err = ignore.Parse(bytes.NewReader(data)); err != nil {
			return nil, fmt.Errorf("%s: %w", b.name(ifile), err)
		}
	}
	rules.AddDefaults()

	var files []*archive.BufferedFile
	budget := archive.MaxDecompressedChartSize
	visited := map[string]bool{}
	var walk func(real, name string) error
	walk = func(real, name string) error {
		if visited[real] {
			return fmt.Errorf("%s: a symbolic link loop in the chart", b.name(filepath.Join(dir, name)))
		}
		visited[real] = true
		defer delete(visited, real)
		entries, err := os.ReadDir(real)
		if err != nil {
			return err
		}
		slices.SortFunc(entries, func(x, y os.DirEntry) int {
			if x.Name() < y.Name() {
				return -1
			}
			if x.Name() > y.Name() {
				return 1
			}
			return 0
		})
		for _, e := range entries {
			n := e.Name()
			if name != "" {
				n = name + "/" + n
			}
			p := filepath.Join(dir, filepath.FromSlash(n))
			target, err := b.resolve(filepath.Join(real, e.Name()))
			if err != nil {
				if errors.Is(err, os.ErrNotExist) {
					continue // a dangling link, as Helm's walk skips it
				}
				return fmt.Errorf("Helm chart file: %w", err)
			}
			fi, err := os.Stat(target)
			if err != nil {
				return err
			}
			if fi.IsDir() {
				if rules.Ignore(n, fi) {
					continue
				}
				if err := walk(target, n); err != nil {
					return err
				}
				continue
			}
			if rules.Ignore(n, fi) {
				continue
			}
			if budget -= fi.Size(); budget < 0 {
				return fmt.Errorf("chart exceeds maximum decompressed size of %d bytes (at %s)", archive.MaxDecompressedChartSize, n)
			}
			data, err := readRegular(target, "Helm chart file "+b.name(p))
			if err != nil {
				return err
			}
			files = append(files, &archive.BufferedFile{Name: n, ModTime: fi.ModTime(), Data: bytes.TrimPrefix(data, []byte("\xEF\xBB\xBF"))})
		}
		return nil
	}
	real, err := b.resolve(dir)
	if err != nil {
		return nil, err
	}
	if err := walk(real, ""); err != nil {
		return nil, err
	}
	return loader.LoadFiles(files)
}

package image

import "testing"

// BenchmarkBuild builds the image of freshly built static binaries, as make image does
// before writing it, and reports its size: what a registry stores (compressed-bytes:
// manifest, config, gzip layers) and what a node unpacks (uncompressed-bytes).
func BenchmarkBuild(b *testing.B) {
	bins := staticBinaries(b)
	var compressed, uncompressed int64
	for b.Loop() {
		img, err := Build(Options{BinDir: bins, Version: testVersion, Revision: testRevision, Created: testCreated})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := img.Digest(); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if compressed, uncompressed, err = Sizes(img); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(compressed), "compressed-bytes")
	b.ReportMetric(float64(uncompressed), "uncompressed-bytes")
}

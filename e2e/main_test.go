package e2e

import (
	"os"
	"testing"

	"github.com/argocd-image-resolver/argocd-image-resolver/e2e/harness"
)

func TestMain(m *testing.M) {
	os.Exit(harness.Main(m))
}

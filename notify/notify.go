// Package notify asks Argo CD to render an Application again: it sets the
// annotation argocd.argoproj.io/refresh=hard on the Application through the
// Kubernetes API, which makes Argo CD's application controller bypass its manifest
// cache for that app once (the same as the UI's "hard refresh").
//
// It knows Argo CD only through the Kubernetes API (the Application resource of
// argoproj.io/v1alpha1), never through Argo CD's Go packages.
package notify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/argocd-image-resolver/argocd-image-resolver/internal/kubeapi"
)

// Argo CD's refresh annotation and the value that bypasses its manifest cache.
const (
	RefreshAnnotation = "argocd.argoproj.io/refresh"
	RefreshHard       = "hard"
	// RefreshNormal makes Argo CD look at the app's source again (a new
	// commit is rendered; an unchanged one is served from its cache).
	RefreshNormal = "normal"
)

// applications is Argo CD's Application resource.
var applications = schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "applications"}

// ErrAppGone is wrapped by the error of a refresh of an Application that does not
// exist (deleted, or renamed): the API server itself answered 404. An answer
// reached through a redirect is never taken for it (redirects are refused).
var ErrAppGone = errors.New("application not found")

// ErrNoCluster is returned by LoadConfig outside a cluster with no KUBECONFIG.
var ErrNoCluster = errors.New("no Kubernetes API: not running in a cluster and KUBECONFIG is not set")

// App names an Argo CD Application.
type App struct {
	Namespace, Name string
}

func (a App) String() string { return a.Namespace + "/" + a.Name }

// ParseApp reads an application name as Argo CD passes it to a plugin
// (ARGOCD_APP_NAME): "name" for an Application in the control-plane namespace,
// "ns_name" for one in namespace ns (apps in any namespace). Neither part may hold
// "_" (both are DNS names), so the split is unambiguous.
func ParseApp(argoName, controlPlaneNamespace string) (App, error) {
	ns, name, found := strings.Cut(argoName, "_")
	if !found {
		ns, name = controlPlaneNamespace, argoName
	}
	for _, part := range []struct{ what, v string }{{"namespace", ns}, {"name", name}} {
		if errs := validation.IsDNS1123Subdomain(part.v); len(errs) > 0 {
			return App{}, fmt.Errorf("application %q: %s %q is not a Kubernetes name (accepted: NAME or NAMESPACE_NAME, lower-case DNS names)", argoName, part.what, part.v)
		}
	}
	return App{Namespace: ns, Name: name}, nil
}

// LoadConfig returns the Kubernetes client configuration: in-cluster (the
// sidecar's ServiceAccount), else the file named by $KUBECONFIG, else ErrNoCluster.
func LoadConfig() (*rest.Config, error) {
	cfg, err := rest.InClusterConfig()
	if err == nil {
		return cfg, nil
	}
	if !errors.Is(err, rest.ErrNotInCluster) {
		return nil, fmt.Errorf("in-cluster Kubernetes configuration: %w", err)
	}
	path := os.Getenv("KUBECONFIG")
	if path == "" {
		return nil, ErrNoCluster
	}
	cfg, err = clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s (KUBECONFIG): %w", path, err)
	}
	return cfg, nil
}

// callTimeout bounds one call to the Kubernetes API.
const callTimeout = 10 * time.Second

// Kubernetes sets the refresh annotation on Applications through the API.
type Kubernetes struct {
	client dynamic.Interface
}

// NewKubernetes returns a Kubernetes notifier talking to the API of cfg. It needs
// get and patch on applications.argoproj.io in the namespaces of the apps it
// refreshes (deploy/rbac.yaml). Answers are bounded (kubeapi.MaxBody) and
// redirects refused: the ServiceAccount token goes to the API server only.
func NewKubernetes(cfg *rest.Config) (*Kubernetes, error) {
	c := rest.CopyConfig(cfg)
	if c.UserAgent == "" {
		c.UserAgent = "argocd-image-resolver"
	}
	hc, err := kubeapi.HTTPClient(c, kubeapi.MaxBody)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	dc, err := dynamic.NewForConfigAndClient(c, hc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return &Kubernetes{client: dc}, nil
}

// HardRefresh asks Argo CD to render app again. It reads the Application first: if
// the annotation is already set (another replica, or a person, asked and Argo CD
// has not yet consumed it) it does nothing more and returns requested=false;
// otherwise it merge-patches the annotation. An Application that does not exist
// gives an error wrapping ErrAppGone.
func (k *Kubernetes) HardRefresh(ctx context.Context, app App) (requested bool, err error) {
	return k.refresh(ctx, app, RefreshHard)
}

// NormalRefresh asks Argo CD to look at app's source again, as its git poll
// would: after a pin commit lands on the branch the app renders. A refresh
// already pending (normal or hard) is left as it is (requested=false).
func (k *Kubernetes) NormalRefresh(ctx context.Context, app App) (requested bool, err error) {
	return k.refresh(ctx, app, RefreshNormal)
}

func (k *Kubernetes) refresh(ctx context.Context, app App, kind string) (requested bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	res := k.client.Resource(applications).Namespace(app.Namespace)
	obj, err := res.Get(ctx, app.Name, metav1.GetOptions{})
	if err != nil {
		return false, apiError("read", app, err)
	}
	if pending := obj.GetAnnotations()[RefreshAnnotation]; pending == RefreshHard || pending == kind {
		return false, nil
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{RefreshAnnotation: kind}}})
	if _, err := res.Patch(ctx, app.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return false, apiError("patch", app, err)
	}
	return true, nil
}

func apiError(verb string, app App, err error) error {
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("%s application %s: %w", verb, app, ErrAppGone)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("%s application %s: %w (the sidecar's ServiceAccount needs get and patch on applications.argoproj.io in namespace %s: deploy/rbac.yaml)", verb, app, err, app.Namespace)
	}
	return fmt.Errorf("%s application %s: %w", verb, app, err)
}

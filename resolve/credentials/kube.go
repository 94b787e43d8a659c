package credentials

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/argocd-image-resolver/argocd-image-resolver/internal/kubeapi"
)

func cfgWithAgent(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	if c.UserAgent == "" {
		c.UserAgent = "argocd-image-resolver"
	}
	return c
}

// kubeClient returns the Kubernetes client, built on first use (a configuration
// error is retried next time). Its answers are bounded and its redirects
// refused (internal/kubeapi).
func (k *Keychain) kubeClient() (kubernetes.Interface, error) {
	k.kubeMu.Lock()
	defer k.kubeMu.Unlock()
	if k.kube != nil {
		return k.kube, nil
	}
	cfg, err := k.o.kubeConfig()
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	cfg = cfgWithAgent(cfg)
	hc, err := kubeapi.HTTPClient(cfg, kubeapi.MaxBody)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	cs, err := kubernetes.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	k.kube = cs
	return cs, nil
}

func (k *Keychain) getSecret(ctx context.Context, ns, name string) (*corev1.Secret, error) {
	cs, err := k.kubeClient()
	if err != nil {
		return nil, err
	}
	s, err := cs.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		// client-go's errors name the secret and the refusal, never its data.
		return nil, err
	}
	return s, nil
}

// pullSecret is pullsecret:NS/NAME: a kubernetes.io/dockerconfigjson (or legacy
// dockercfg) secret read through the API, used for DefaultSecretExpire (or
// credentialsExpire) and read again when the registry rejects it.
func (k *Keychain) pullSecret(ns, name string) fetchFunc {
	return func(ctx context.Context) (*material, error) {
		s, err := k.getSecret(ctx, ns, name)
		if err != nil {
			return nil, err
		}
		raw, ok := s.Data[corev1.DockerConfigJsonKey]
		if !ok {
			raw, ok = s.Data[corev1.DockerConfigKey]
		}
		if !ok {
			return nil, fmt.Errorf("secret %s/%s (type %s) has neither %s nor %s", ns, name, s.Type,
				corev1.DockerConfigJsonKey, corev1.DockerConfigKey)
		}
		ring, err := parseDockerConfig(raw)
		if err != nil {
			return nil, fmt.Errorf("secret %s/%s: %w", ns, name, err)
		}
		m := ring.material()
		m.ttl = DefaultSecretExpire
		return m, nil
	}
}

// secretField is secret:NS/NAME#FIELD: user:password in one field of a secret.
func (k *Keychain) secretField(ns, name, field string) fetchFunc {
	return func(ctx context.Context) (*material, error) {
		s, err := k.getSecret(ctx, ns, name)
		if err != nil {
			return nil, err
		}
		raw, ok := s.Data[field]
		if !ok {
			return nil, fmt.Errorf("secret %s/%s has no field %s", ns, name, field)
		}
		ac, err := parseUserPass(raw)
		if err != nil {
			return nil, fmt.Errorf("secret %s/%s field %s: %w", ns, name, field, err)
		}
		return &material{lookup: single(ac), ttl: DefaultSecretExpire, what: "user " + ac.Username}, nil
	}
}

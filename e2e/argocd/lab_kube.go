package argocde2e

// The lab's etcd and kube-apiserver.

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

func (l *Lab) startKube() error {
	ports, err := freePorts(3)
	if err != nil {
		return err
	}
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	etcd, err := l.start("etcd", l.baseEnv(), "etcd", "--name", "e2e", "--data-dir", filepath.Join(l.Dir, "etcd"),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "e2e="+peerURL, "--listen-metrics-urls", "",
		"--logger", "zap", "--log-level", "warn", "--unsafe-no-fsync")
	if err != nil {
		return err
	}
	if err := waitFor(30*time.Second, "etcd /health", etcd, httpOK(etcdURL+"/health")); err != nil {
		return err
	}

	// Service-account keys and a static admin token (group system:masters).
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	pki := filepath.Join(l.Dir, "pki")
	if err := os.WriteFile(filepath.Join(pki, "sa.key"), pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(pki, "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644); err != nil {
		return err
	}
	tok := make([]byte, 24)
	_, _ = rand.Read(tok)
	token := hex.EncodeToString(tok)
	if err := os.WriteFile(filepath.Join(pki, "tokens.csv"), []byte(token+",e2e-admin,e2e-admin,system:masters\n"), 0o600); err != nil {
		return err
	}
	// No kube-controller-manager, scheduler or kubelet: objects are stored, pods never
	// run (Deployments stay Progressing), which Argo CD does not mind.
	// --endpoint-reconciler-type=none: the kubernetes Service's endpoint would be
	// 127.0.0.1, which the API refuses.
	kas, err := l.start("kube-apiserver", l.baseEnv(), "kube-apiserver",
		"--etcd-servers", etcdURL,
		"--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1", "--secure-port", fmt.Sprint(ports[2]),
		"--cert-dir", pki, "--token-auth-file", filepath.Join(pki, "tokens.csv"),
		"--authorization-mode", "RBAC",
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file", filepath.Join(pki, "sa.pub"),
		"--service-account-signing-key-file", filepath.Join(pki, "sa.key"),
		"--service-cluster-ip-range", "10.96.0.0/16", "--endpoint-reconciler-type", "none",
		"--disable-admission-plugins", "ServiceAccount",
		"--enable-priority-and-fairness=false", "--profiling=false")
	if err != nil {
		return err
	}
	kubeconfig := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: https://127.0.0.1:%d
    insecure-skip-tls-verify: true
users:
- name: e2e-admin
  user:
    token: %s
contexts:
- name: e2e
  context: {cluster: e2e, user: e2e-admin, namespace: argocd}
current-context: e2e
`, ports[2], token)
	if err := os.WriteFile(l.Kubeconfig, []byte(kubeconfig), 0o600); err != nil {
		return err
	}
	l.kubeURL, l.kubeToken = fmt.Sprintf("https://127.0.0.1:%d", ports[2]), token
	return waitFor(90*time.Second, "kube-apiserver /readyz", kas,
		httpOK(fmt.Sprintf("https://127.0.0.1:%d/readyz", ports[2]), "Authorization", "Bearer "+token))
}

// applyArgoConfig applies Argo CD's CRDs (from its module, copied by build.sh) and
// the config objects an install has.
func (l *Lab) applyArgoConfig() error {
	if _, err := l.must("", "kubectl", "create", "namespace", "argocd"); err != nil {
		return err
	}
	if _, err := l.must("", "kubectl", "apply", "--server-side", "-f", filepath.Join(l.ArgoDir, "crds")); err != nil {
		return err
	}
	if err := waitFor(30*time.Second, "the CRDs to be served", nil, func() error {
		_, err := l.must("", "kubectl", "get", "applications.argoproj.io,appprojects.argoproj.io", "-A")
		return err
	}); err != nil {
		return err
	}
	bcrypt, err := l.must("", "argocd", "account", "bcrypt", "--password", adminPassword)
	if err != nil {
		return err
	}
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	cm := func(name string, data string) string {
		return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: %s, namespace: argocd, labels: {app.kubernetes.io/name: %s, app.kubernetes.io/part-of: argocd}}\n%s---\n", name, name, data)
	}
	objs := cm("argocd-cm", "data:\n  admin.enabled: \"true\"\n  # no automatic re-compare during a test: refreshes are what the tests do\n  timeout.reconciliation: 600s\n") +
		cm("argocd-rbac-cm", "") + cm("argocd-cmd-params-cm", "") + cm("argocd-tls-certs-cm", "") +
		cm("argocd-ssh-known-hosts-cm", "") + cm("argocd-gpg-keys-cm", "") +
		fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata: {name: argocd-secret, namespace: argocd, labels: {app.kubernetes.io/name: argocd-secret, app.kubernetes.io/part-of: argocd}}
type: Opaque
stringData:
  admin.password: '%s'
  admin.passwordMtime: '%s'
  server.secretkey: '%s'
`, strings.TrimSpace(bcrypt), time.Now().UTC().Format(time.RFC3339), hex.EncodeToString(secret))
	_, err = l.must(objs, "kubectl", "apply", "-f", "-")
	return err
}

// grantSidecar gives the sidecar what an install gives it: the argocd-repo-server
// ServiceAccount (Argo CD's install creates it), deploy/rbac.yaml applied in the
// control-plane namespace, and a kubeconfig with a token of that ServiceAccount, so
// the refresh loop runs with exactly the rights the shipped RBAC grants.
func (l *Lab) grantSidecar() error {
	if _, err := l.must("", "kubectl", "-n", "argocd", "create", "serviceaccount", "argocd-repo-server"); err != nil {
		return err
	}
	if _, err := l.must("", "kubectl", "-n", "argocd", "apply", "-f", filepath.Join(l.Paths.Root, "deploy", "rbac.yaml")); err != nil {
		return err
	}
	token, err := l.must("", "kubectl", "-n", "argocd", "create", "token", "argocd-repo-server", "--duration", "6h")
	if err != nil {
		return err
	}
	kubeconfig := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster: {server: %s, insecure-skip-tls-verify: true}
users:
- name: argocd-repo-server
  user: {token: %s}
contexts:
- name: e2e
  context: {cluster: e2e, user: argocd-repo-server, namespace: argocd}
current-context: e2e
`, l.kubeURL, strings.TrimSpace(token))
	return os.WriteFile(l.SidecarKubeconfig, []byte(kubeconfig), 0o600)
}

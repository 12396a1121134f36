package coredns

import (
	"context"
	"fmt"
	"os"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// The identity kubeadm gives CoreDNS: ServiceAccount kube-system/coredns
// bound to ClusterRole system:coredns.
const (
	serviceAccountNamespace = "kube-system"
	serviceAccountName      = "coredns"
	clusterRoleName         = "system:coredns"
)

// tokenSeconds is how long CoreDNS's token lasts. CoreDNS reads its
// kubeconfig once: a CoreDNS running longer loses the API (its watches
// fail with 401) and its answers go stale.
const tokenSeconds = 24 * 60 * 60

// clusterRole is kubeadm's system:coredns ClusterRole (v1.37.2).
func clusterRole() *rbacv1.ClusterRole {
	return &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: clusterRoleName},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"endpoints", "services", "pods", "namespaces"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
		},
	}
}

// clusterRoleBinding is kubeadm's system:coredns ClusterRoleBinding.
func clusterRoleBinding() *rbacv1.ClusterRoleBinding {
	return &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: clusterRoleName},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRoleName},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: serviceAccountName, Namespace: serviceAccountNamespace}},
	}
}

// grant creates the ServiceAccount, ClusterRole and ClusterRoleBinding
// (those that exist are left as they are) and returns a token of the
// ServiceAccount from the TokenRequest API.
func grant(ctx context.Context, c kubernetes.Interface) (string, error) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: serviceAccountNamespace, Name: serviceAccountName}}
	creates := []func() error{
		func() error {
			_, err := c.CoreV1().ServiceAccounts(sa.Namespace).Create(ctx, sa, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := c.RbacV1().ClusterRoles().Create(ctx, clusterRole(), metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := c.RbacV1().ClusterRoleBindings().Create(ctx, clusterRoleBinding(), metav1.CreateOptions{})
			return err
		},
	}
	for _, create := range creates {
		if err := create(); err != nil && !apierrors.IsAlreadyExists(err) {
			return "", fmt.Errorf("coredns: RBAC: %w", err)
		}
	}
	exp := int64(tokenSeconds)
	tr, err := c.CoreV1().ServiceAccounts(sa.Namespace).CreateToken(ctx, sa.Name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("coredns: token for %s/%s: %w", sa.Namespace, sa.Name, err)
	}
	return tr.Status.Token, nil
}

// writeKubeconfig writes a kubeconfig (mode 0600) with one context, named
// "coredns", for the API server of rc authenticated by token.
func writeKubeconfig(path string, rc *rest.Config, token string) error {
	c := clientcmdapi.NewConfig()
	c.Clusters["coredns"] = &clientcmdapi.Cluster{Server: rc.Host, CertificateAuthorityData: rc.CAData,
		CertificateAuthority: rc.CAFile, TLSServerName: rc.ServerName, InsecureSkipTLSVerify: rc.Insecure}
	c.AuthInfos["coredns"] = &clientcmdapi.AuthInfo{Token: token}
	c.Contexts["coredns"] = &clientcmdapi.Context{Cluster: "coredns", AuthInfo: "coredns"}
	c.CurrentContext = "coredns"
	b, err := clientcmd.Write(*c)
	if err != nil {
		return fmt.Errorf("coredns: kubeconfig: %w", err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("coredns: kubeconfig: %w", err)
	}
	return nil
}

package workers

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
)

// TestFlattened: what MultiKueue gets reads no file — a token file's token
// is inlined — and a kubeconfig signing in through a plugin, which
// MultiKueue cannot run, is refused saying so.
func TestFlattened(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tok := write("token", "s3cret-token\n")
	const head = "apiVersion: v1\nkind: Config\nclusters: [{name: w, cluster: {server: 'https://w.example:6443', insecure-skip-tls-verify: true}}]\ncontexts: [{name: w, context: {cluster: w, user: u}}]\ncurrent-context: w\n"
	data, err := flattened(write("token.kubeconfig", head+"users: [{name: u, user: {tokenFile: '"+tok+"'}}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	kc, err := clientcmd.Load(data)
	if err != nil {
		t.Fatal(err)
	}
	if u := kc.AuthInfos["u"]; u.Token != "s3cret-token" || u.TokenFile != "" {
		t.Errorf("the token file's token not inlined: %+v", u)
	}
	_, err = flattened(write("exec.kubeconfig", head+"users: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1, command: aws}}}]\n"))
	if err == nil || !strings.Contains(err.Error(), "plugin, which MultiKueue cannot run") {
		t.Errorf("an exec plugin: %v", err)
	}
	if _, err := flattened(write("gone.kubeconfig", head+"users: [{name: u, user: {tokenFile: '"+filepath.Join(dir, "nope")+"'}}]\n")); err == nil || !strings.Contains(err.Error(), "token file that cannot be read") {
		t.Errorf("a token file that is not there: %v", err)
	}
}

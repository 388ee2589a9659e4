package e2e_test

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/gantryhq/gantry/api/client"
	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/devcluster"
	"github.com/gantryhq/gantry/internal/devcluster/clustertest"
	"github.com/gantryhq/gantry/internal/devidp"
	"github.com/gantryhq/gantry/internal/devregistry"
	"github.com/gantryhq/gantry/internal/gpu"
	"github.com/gantryhq/gantry/internal/imagecat"
	"github.com/gantryhq/gantry/internal/imagesign"
	"github.com/gantryhq/gantry/internal/imageverify"
	"github.com/gantryhq/gantry/internal/servertest"
	"github.com/gantryhq/gantry/internal/tlsfiles/tlstest"
	"github.com/gantryhq/gantry/internal/waitfor"
	"github.com/gantryhq/gantry/internal/workload"
)

// TestGantryAsAPod: the whole product as an operator runs it. Gantry's own
// image, built from this tree (cmd/gantry-images) and pushed to a registry,
// is installed by the Helm chart onto the real node, on Debian's PostgreSQL
// in a pod beside it, signing people in with an OpenID provider over HTTPS
// under a private CA. A person
// signs in through the portal's sign-in, makes a token, launches an
// inference service on the simulated GPU fleet (its image verified by the
// Gantry in the pod against the catalog's key) and a CPU notebook on the
// real node, whose Jupyter answers through the pod's /w/{id}/.
//
// The local cluster has no cluster DNS and no kube-proxy, and the real
// node's pods reach the host only through forwarders on the host's side of
// the node's veth pair (devcluster.Cluster.Forward). So, where an operator's
// cluster would need none of it:
//   - the pod reaches the API server at kubernetes.default.svc (a name its
//     certificate carries) through hostAliases and a forwarder, set with the
//     chart's hostAliases and extraEnv;
//   - it reaches apps through their Services' endpoints (appDial: endpoints);
//   - the OpenID provider and the registry are the host's, behind
//     forwarders (as a provider and a registry outside the cluster are);
//   - people reach Gantry through a front on the host's loopback that
//     stands for the Ingress, relaying to the pod's address.
func TestGantryAsAPod(t *testing.T) {
	if cluster == nil {
		t.Skip(clustertest.ErrNotRequested)
	}
	t.Parallel() // the real node's tests: see gates_test.go
	_, err := cluster.RealNode()
	clustertest.NeedRealNode(t, "the real node", err)
	pgUID, pgGID, err := userIn(filepath.Join(devregistry.ImagesDir(), "postgres", "15-debian12", "layer.tar.gz"), "postgres")
	clustertest.NeedRealNode(t, "the image postgres:15-debian12 (deploy/images/build.sh, as root; .ci/test runs it)", err)
	ctx := t.Context()
	root, err := devcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	forward := func(target func() string) string {
		t.Helper()
		addr, stop, err := cluster.Forward(target)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(stop)
		return addr
	}
	fixed := func(addr string) func() string { return func() string { return addr } }

	// The catalog's images, signed by a key of this test's, in a registry
	// the real node pulls from; Gantry's own image pushed there too.
	classes, err := gpu.LoadFile(filepath.Join(root, "templates", "gpu-classes.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cat, err := imagecat.Load(filepath.Join(root, "images"), classes)
	if err != nil {
		t.Fatal(err)
	}
	key, err := imagesign.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	regCtx, stopReg := context.WithCancel(context.Background())
	t.Cleanup(stopReg)
	reg, _, err := devregistry.Verified(regCtx, cat, key, imageverify.Options{Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	if err := cluster.MirrorRegistries(reg.Mirrors); err != nil {
		t.Fatal(err)
	}
	keyFile := keyFileOf(t, key)
	began := time.Now()
	_, pushed := gantryImages(t, root, "-out", t.TempDir(), "-push", reg.Host+"/gantryhq", "-insecure", "-key", keyFile)
	t.Logf("Gantry's images built and pushed in %s", time.Since(began).Round(time.Second))
	// Both of the real node's slots from here: Gantry and its database run
	// there beside the notebook, each with its own share of the cores.
	holdRealNode(t, 2)
	server, ok := pushed["gantry"]
	if !ok {
		t.Fatalf("pushed %v: want Gantry's image", pushed)
	}
	catalogHost := ""
	for host := range reg.Mirrors {
		catalogHost = host
	}
	if len(reg.Mirrors) != 1 {
		t.Fatalf("the catalog names registries %v: want one", reg.Mirrors)
	}
	pub, err := reg.Signer.PublicKeyPEM()
	if err != nil {
		t.Fatal(err)
	}

	// The OpenID provider over HTTPS, at the forwarder's address: the pod
	// and the person's browser both reach it by that one issuer URL.
	idpLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	idpAddr := forward(fixed(idpLn.Addr().String()))
	nodeSide, _, _ := net.SplitHostPort(idpAddr)
	ca := tlstest.NewCA(t) // only the CA Gantry is given trusts the provider
	caPEM, idpCert := ca.PEM, ca.Serving(t, nodeSide)

	// The front people reach Gantry by (the Ingress's part): the pod's
	// address once it has one.
	var podAddr atomic.Value
	podAddr.Store("")
	front, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { front.Close() })
	go devcluster.Relay(front, func() string { return podAddr.Load().(string) })
	publicURL := "http://" + front.Addr().String()

	idp, err := devidp.New(devidp.Options{Issuer: "https://" + idpAddr,
		Users:   []devidp.User{{Username: "ada", Password: "ada", Name: "Ada Lovelace", Email: "ada@example.com", Groups: []string{"gantry-admins"}, SecondFactor: true}},
		Clients: []devidp.Client{{ID: "gantry-portal", Secret: "portal-secret", RedirectURIs: []string{publicURL + "/auth/callback"}}}})
	if err != nil {
		t.Fatal(err)
	}
	idpSrv := &http.Server{Handler: idp, ReadHeaderTimeout: 10 * time.Second, TLSConfig: &tls.Config{Certificates: []tls.Certificate{idpCert}}}
	go idpSrv.ServeTLS(idpLn, "", "")
	t.Cleanup(func() { idpSrv.Close() })

	// The API server, for the pod.
	api, err := url.Parse(cluster.Config().Host)
	if err != nil {
		t.Fatal(err)
	}
	_, apiPort, _ := net.SplitHostPort(forward(fixed(api.Host)))

	// What the operator creates before installing: the catalog, the key
	// the catalog's images are signed with, the provider's CA, the
	// database's URL and the portal client's secret.
	ns := "gantry-pod-" + workload.NewID()
	if _, err := cluster.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cluster.Client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	})
	dsn := postgresBeside(t, reg, catalogHost, ns, pgUID, pgGID)
	configMap := func(name string, data map[string]string) {
		t.Helper()
		if _, err := cluster.Client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: data}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	configMap("catalog-templates", filesIn(t, filepath.Join(root, "templates")))
	configMap("catalog-policy", filesIn(t, testPolicy(t)))
	configMap("catalog-images", filesIn(t, filepath.Join(root, "images")))
	configMap("catalog-image-keys", map[string]string{"platform.pub": string(pub)})
	configMap("provider-ca", map[string]string{"ca.crt": string(caPEM)})
	for name, data := range map[string]map[string]string{"database": {"dsn": dsn}, "portal-client": {"clientSecret": "portal-secret"}} {
		if _, err := cluster.Client.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, StringData: data}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	values := map[string]any{
		"replicas":  1,
		"image":     map[string]any{"repository": catalogHost + "/gantryhq/gantry", "digest": server.DigestStr()},
		"publicURL": publicURL,
		"appDial":   "endpoints",
		"database":  map[string]any{"driver": "postgres", "existingSecret": "database"},
		"oidc": map[string]any{"issuer": "https://" + idpAddr, "clientID": "gantry-portal",
			"clientSecret": map[string]any{"existingSecret": "portal-client"}},
		"catalog": map[string]any{
			"templates": map[string]any{"configMap": "catalog-templates"}, "policy": map[string]any{"configMap": "catalog-policy"},
			"images": map[string]any{"configMap": "catalog-images"}, "imageKeys": map[string]any{"configMap": "catalog-image-keys"}},
		"images":            map[string]any{"mirrors": map[string]string{catalogHost: forward(fixed(reg.Host))}},
		"extraCA":           map[string]any{"configMap": "provider-ca"},
		"agent":             map[string]any{"enabled": false},
		"priorityClasses":   map[string]any{"create": false}, // the cluster has them
		"priorityClassName": "gantry-server",
		"nodeSelector":      map[string]string{devcluster.RealNodeLabel: "true"},
		"tolerations":       []map[string]string{{"key": devcluster.RealNodeLabel, "operator": "Exists", "effect": "NoSchedule"}},
		"hostAliases":       []map[string]any{{"ip": nodeSide, "hostnames": []string{"kubernetes.default.svc"}}},
		"extraEnv": []map[string]string{{"name": "KUBERNETES_SERVICE_HOST", "value": "kubernetes.default.svc"},
			{"name": "KUBERNETES_SERVICE_PORT", "value": apiPort}},
	}
	valuesYAML, err := yaml.Marshal(values)
	if err != nil {
		t.Fatal(err)
	}
	valuesFile := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(valuesFile, valuesYAML, 0o600); err != nil {
		t.Fatal(err)
	}
	began = time.Now()
	helmChart(t, "install", "pod", filepath.Join(root, "deploy", "helm", "gantry"), "--namespace", ns, "-f", valuesFile)
	t.Cleanup(func() { helmChart(t, "uninstall", "pod", "--namespace", ns, "--wait") })
	t.Cleanup(func() {
		if t.Failed() {
			gantryPodSaid(t, ns)
		}
	})

	// Gantry's pod runs on the real node and is ready (its database and
	// the cluster answer).
	var pod corev1.Pod
	waitfor.Until(t, 4*time.Minute, "Gantry's pod ready on the real node", func() error {
		pods, err := cluster.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=pod,app.kubernetes.io/name=gantry"})
		if err != nil {
			return err
		}
		if len(pods.Items) != 1 {
			return fmt.Errorf("%d pods", len(pods.Items))
		}
		pod = pods.Items[0]
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && pod.Status.PodIP != "" {
				return nil
			}
		}
		return fmt.Errorf("pod %s on %q: %s %s", pod.Name, pod.Spec.NodeName, pod.Status.Phase, podWhy(pod))
	})
	if pod.Spec.NodeName != devcluster.RealNodeName || pod.Spec.Containers[0].Image != catalogHost+"/gantryhq/gantry@"+server.DigestStr() {
		t.Fatalf("Gantry's pod runs %s on %s", pod.Spec.Containers[0].Image, pod.Spec.NodeName)
	}
	// Above every workload's priority (the chart's gantry-server).
	if pod.Spec.PriorityClassName != "gantry-server" || servertest.Deref(pod.Spec.Priority) <= 100000 {
		t.Errorf("Gantry's pod has PriorityClass %q, priority %d: want gantry-server, above gantry-high's", pod.Spec.PriorityClassName, servertest.Deref(pod.Spec.Priority))
	}
	podAddr.Store(net.JoinHostPort(pod.Status.PodIP, "8080"))
	t.Logf("Gantry's pod %s ready at %s %s after the install", pod.Name, pod.Status.PodIP, time.Since(began).Round(time.Second))

	// A person signs in through the portal and the provider's form, over
	// HTTPS to a provider only the private CA vouches for.
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar, Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	_, page, err := devidp.SignIn(ctx, browser, publicURL+"/auth/login", "ada", "ada")
	if err != nil {
		t.Fatal(err)
	}
	csrf := regexp.MustCompile(`<meta name="csrf-token" content="([^"]+)">`).FindStringSubmatch(page)
	if csrf == nil {
		t.Fatalf("signed in, but no CSRF token on the page:\n%.2000s", page)
	}
	ses := servertest.Client(publicURL, "", client.WithHTTPClient(browser), client.WithRequestEditorFn(servertest.Header("X-CSRF-Token", csrf[1])))
	tr := servertest.Must(ses.CreateTokenWithResponse(ctx, model.TokenRequest{Name: "e2e", ExpiresInDays: 1}))(t)
	if tr.StatusCode() != 201 {
		t.Fatalf("a token: %d %s", tr.StatusCode(), tr.Body)
	}
	tok := servertest.Deref(tr.JSON201).Token
	ada := servertest.Client(publicURL, tok)

	launch := func(req model.LaunchRequest) model.Workload {
		t.Helper()
		r := servertest.Must(ada.CreateWorkloadWithResponse(ctx, nil, req))(t)
		if r.StatusCode() != 201 {
			t.Fatalf("launch %s: %d %s", req.Template, r.StatusCode(), r.Body)
		}
		w := servertest.Deref(r.JSON201)
		t.Cleanup(func() {
			ada.DeleteWorkloadWithResponse(context.Background(), w.Id)
			waitfor.Until(t, 2*time.Minute, "workload "+w.Id+"'s pods gone", func() error {
				if pods := podsOf(t, w.Team, w.Id); len(pods) > 0 {
					return fmt.Errorf("%d pods", len(pods))
				}
				return nil
			})
		})
		return w
	}
	running := func(w model.Workload) model.Workload {
		t.Helper()
		waitfor.Until(t, 3*time.Minute, "workload "+w.Id+" Running", func() error {
			r := servertest.Must(ada.GetWorkloadWithResponse(ctx, w.Id))(t)
			if w = servertest.Deref(r.JSON200); w.Status != "Running" {
				return fmt.Errorf("%s (%s)", w.Status, servertest.Deref(w.Reason))
			}
			return nil
		})
		return w
	}

	// On the simulated GPU fleet: verified by the Gantry in the pod (the
	// image it applied is pinned by digest).
	began = time.Now()
	svc := running(launch(model.LaunchRequest{Template: "vllm-inference", Team: "vision"}))
	if pods := podsOf(t, "vision", svc.Id); len(pods) == 0 || !strings.Contains(pods[0].Spec.Containers[0].Image, "@sha256:") || pods[0].Spec.NodeName == devcluster.RealNodeName {
		t.Fatalf("the GPU service's pods: %v", pods)
	}

	t.Logf("the GPU service %s Running in %s", svc.Id, time.Since(began).Round(time.Second))

	// On the real node: Debian's Jupyter, through the pod's /w/{id}/.
	began = time.Now()
	nb := running(launch(model.LaunchRequest{Template: "cpu-notebook", Team: "vision"}))
	hc := &http.Client{Timeout: 30 * time.Second}
	t.Cleanup(hc.CloseIdleConnections)
	waitfor.Until(t, 3*time.Minute, "Jupyter answering through the pod's /w/"+nb.Id+"/", func() error {
		req, err := http.NewRequestWithContext(ctx, "GET", publicURL+servertest.Deref(nb.Url)+"api", nil)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || !strings.Contains(string(b), `"version": "6.4`) && !strings.Contains(string(b), `"version":"6.4`) {
			return fmt.Errorf("%d %.200s", resp.StatusCode, b)
		}
		return nil
	})
	t.Logf("the notebook %s answering through the pod in %s", nb.Id, time.Since(began).Round(time.Second))
	// The pod that answered all along is the one that started: the
	// notebook beside it on the node (gantry-normal, which preempts lower
	// priorities) did not preempt it.
	if now, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{}); err != nil || now.DeletionTimestamp != nil {
		t.Errorf("Gantry's pod %s after the notebook started: %v", pod.Name, err)
	}
}

// postgresBeside runs Debian's PostgreSQL 15 (deploy/images/build.sh's
// postgres image, pushed to reg) in a pod on the real node in namespace ns
// as its postgres user (uid, gid), waits for it to listen and returns its
// URL.
func postgresBeside(t *testing.T, reg *devregistry.Registry, catalogHost, ns string, uid, gid int64) string {
	t.Helper()
	ctx := t.Context()
	const image, tag = "postgres", "15-debian12"
	repo, err := reg.Local(catalogHost + "/gantry-e2e/" + image)
	if err != nil {
		t.Fatal(err)
	}
	d, err := reg.PushCached(ctx, repo.Tag(tag), image, tag)
	if err != nil {
		t.Fatal(err)
	}
	script := `set -e
PATH=/usr/lib/postgresql/15/bin:$PATH
initdb -D /var/lib/postgresql/data/pg -U gantry -A trust -E UTF8 --locale=C --no-sync > /dev/null
echo "host all all all trust" >> /var/lib/postgresql/data/pg/pg_hba.conf
exec postgres -D /var/lib/postgresql/data/pg -c listen_addresses='*' -k /tmp -c fsync=off`
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "postgres", Labels: map[string]string{"app": "postgres"}},
		Spec: corev1.PodSpec{
			PriorityClassName: "gantry-server", // Gantry's database: no workload preempts it either
			NodeSelector:      map[string]string{devcluster.RealNodeLabel: "true"},
			Tolerations:       []corev1.Toleration{{Key: devcluster.RealNodeLabel, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: new(true), RunAsUser: &uid, RunAsGroup: &gid, FSGroup: &gid,
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{Name: "postgres", Image: catalogHost + "/gantry-e2e/" + image + "@" + d.DigestStr(),
				Command: []string{"sh", "-c", script},
				Ports:   []corev1.ContainerPort{{Name: "postgres", ContainerPort: 5432}},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(5432)}},
					PeriodSeconds: 1},
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: new(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
				VolumeMounts:    []corev1.VolumeMount{{Name: "data", MountPath: "/var/lib/postgresql/data"}, {Name: "tmp", MountPath: "/tmp"}}}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		}}
	if _, err := cluster.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, 3*time.Minute, "PostgreSQL ready on the real node", func() error {
		p, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, "postgres", metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && p.Status.PodIP != "" {
				pod = p
				return nil
			}
		}
		return fmt.Errorf("%s on %q: %s", p.Status.Phase, p.Spec.NodeName, podWhy(*p))
	})
	return "postgres://gantry@" + net.JoinHostPort(pod.Status.PodIP, "5432") + "/postgres?sslmode=disable"
}

// userIn reads a user's ids from /etc/passwd in an image's layer
// (a gzipped tar).
func userIn(layer, user string) (uid, gid int64, err error) {
	f, err := os.Open(layer)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return 0, 0, err
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err != nil {
			return 0, 0, fmt.Errorf("%s: no /etc/passwd: %w", layer, err)
		}
		if strings.TrimPrefix(h.Name, "./") != "etc/passwd" {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return 0, 0, err
		}
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Split(line, ":")
			if len(f) > 3 && f[0] == user {
				uid, err1 := strconv.ParseInt(f[2], 10, 64)
				gid, err2 := strconv.ParseInt(f[3], 10, 64)
				if err1 != nil || err2 != nil {
					return 0, 0, fmt.Errorf("%s: /etc/passwd: %q", layer, line)
				}
				return uid, gid, nil
			}
		}
		return 0, 0, fmt.Errorf("%s: no user %s in /etc/passwd", layer, user)
	}
}

// filesIn reads the files of dir (not its subdirectories) as a ConfigMap's
// data.
func filesIn(t *testing.T, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	data := map[string]string{}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		data[e.Name()] = string(b)
	}
	return data
}

// gantryPodSaid logs what Gantry's pods in ns were doing: their state and
// the end of their logs (and of the container before a restart).
func gantryPodSaid(t *testing.T, ns string) {
	ctx := context.Background()
	pods, err := cluster.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Logf("Gantry's pods: %v", err)
		return
	}
	tail := int64(40)
	for _, p := range pods.Items {
		t.Logf("pod %s on %q: %s %s", p.Name, p.Spec.NodeName, p.Status.Phase, podWhy(p))
		for _, s := range p.Status.ContainerStatuses {
			if l := s.LastTerminationState.Terminated; l != nil {
				t.Logf("  %s before its restart: %s (exit %d) %s", s.Name, l.Reason, l.ExitCode, l.Message)
			}
		}
		for _, previous := range []bool{true, false} {
			b, err := cluster.Client.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{TailLines: &tail, Previous: previous}).DoRaw(ctx)
			if err == nil {
				t.Logf("  logs (previous %v):\n%s", previous, b)
			}
		}
	}
}

// podWhy is what a pod's containers wait or ended for.
func podWhy(p corev1.Pod) string {
	var why []string
	if p.Status.Reason != "" || p.Status.Message != "" { // the kubelet's own: Evicted, a node's pressure
		why = append(why, p.Status.Reason+": "+p.Status.Message)
	}
	for _, s := range p.Status.ContainerStatuses {
		if w := s.State.Waiting; w != nil {
			why = append(why, w.Reason+": "+w.Message)
		}
		if e := s.State.Terminated; e != nil {
			why = append(why, fmt.Sprintf("%s (exit %d): %s", e.Reason, e.ExitCode, e.Message))
		}
		if s.RestartCount > 0 {
			why = append(why, fmt.Sprintf("%d restarts", s.RestartCount))
		}
	}
	return strings.Join(why, "; ")
}

package workers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport/spdy"
	"k8s.io/streaming/pkg/httpstream"

	"github.com/gantryhq/gantry/internal/render"
)

// Dial opens a connection to port of the running pod of workload id in
// namespace on a worker cluster (interactive.Workers), through the worker
// API server's port-forward (pods/portforward) with Gantry's credentials
// there: the worker's pod network need not be reachable from Gantry, and
// nothing passes through the API server's HTTP proxy, which rewrites the
// links of HTML pages and redirects to its own path.
func (w *Workers) Dial(ctx context.Context, cluster, namespace, id string, port int) (net.Conn, error) {
	c := w.get(cluster)
	if c.config == nil {
		return nil, fmt.Errorf("worker %s: its credentials have not been read", cluster)
	}
	pods, err := c.core.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: render.LabelWorkloadID + "=" + id})
	if err != nil {
		return nil, fmt.Errorf("worker %s: the pods of workload %s: %w", cluster, id, err)
	}
	var pod *corev1.Pod
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil && (pod == nil || p.CreationTimestamp.After(pod.CreationTimestamp.Time)) {
			pod = p
		}
	}
	if pod == nil {
		return nil, fmt.Errorf("worker %s: workload %s has no running pod", cluster, id)
	}
	return portForward(ctx, c.config, c.core, namespace, pod.Name, port)
}

// portForwardProtocol is the port-forward subprotocol the API server and
// the kubelet speak (client-go's tools/portforward.PortForwardProtocolV1Name).
const portForwardProtocol = "portforward.k8s.io"

// portForward opens one port-forward stream to a pod's port, as kubectl
// port-forward does for each connection: a data stream and an error
// stream on one upgraded connection, closed together. ctx bounds the dial
// and the upgrade.
func portForward(ctx context.Context, cfg *rest.Config, core kubernetes.Interface, namespace, pod string, port int) (net.Conn, error) {
	where := fmt.Sprintf("%s/%s:%d", namespace, pod, port)
	rt, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("port-forward to %s: %w", where, err)
	}
	u := core.CoreV1().RESTClient().Post().Namespace(namespace).Resource("pods").Name(pod).SubResource("portforward").URL()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("port-forward to %s: %w", where, err)
	}
	conn, _, err := spdy.NegotiateStreaming(upgrader, &http.Client{Transport: rt}, req, portForwardProtocol)
	if err != nil {
		return nil, fmt.Errorf("port-forward to %s: %w", where, err)
	}
	h := http.Header{}
	h.Set(corev1.StreamType, corev1.StreamTypeError)
	h.Set(corev1.PortHeader, strconv.Itoa(port))
	h.Set(corev1.PortForwardRequestIDHeader, "0")
	errStream, err := conn.CreateStream(h)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("port-forward to %s: its error stream: %w", where, err)
	}
	errStream.Close() // nothing is sent on it
	h.Set(corev1.StreamType, corev1.StreamTypeData)
	data, err := conn.CreateStream(h)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("port-forward to %s: its data stream: %w", where, err)
	}
	fc := &forwarded{conn: conn, data: data, addr: forwardAddr(where), said: make(chan struct{})}
	go func() {
		// The kubelet says here why the port could not be reached.
		defer close(fc.said)
		msg, _ := io.ReadAll(errStream)
		if len(msg) > 0 {
			fc.fail(fmt.Errorf("port-forward to %s: %s", where, msg))
		}
	}()
	return fc, nil
}

// forwarded is a port-forward's data stream as a net.Conn; deadlines are
// not kept (the proxy's requests carry contexts).
type forwarded struct {
	conn httpstream.Connection
	data httpstream.Stream
	addr net.Addr
	said chan struct{} // closed once the error stream has ended

	mu   sync.Mutex
	err  error
	once sync.Once
}

func (f *forwarded) fail(err error) {
	f.mu.Lock()
	f.err = err
	f.mu.Unlock()
	f.Close()
}

func (f *forwarded) failure(err error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return errors.Join(f.err, err)
	}
	return err
}

func (f *forwarded) Read(b []byte) (int, error) {
	n, err := f.data.Read(b)
	switch {
	case err == io.EOF:
		// The kubelet ends the data stream when the port refuses, and
		// says why on the error stream: that, when it comes in time.
		select {
		case <-f.said:
		case <-time.After(100 * time.Millisecond):
		}
		f.mu.Lock()
		if f.err != nil {
			err = f.err
		}
		f.mu.Unlock()
	case err != nil:
		err = f.failure(err)
	}
	return n, err
}

func (f *forwarded) Write(b []byte) (int, error) {
	n, err := f.data.Write(b)
	if err != nil {
		err = f.failure(err)
	}
	return n, err
}

func (f *forwarded) Close() error {
	f.once.Do(func() {
		f.data.Reset()
		f.conn.Close()
	})
	return nil
}

func (f *forwarded) LocalAddr() net.Addr              { return f.addr }
func (f *forwarded) RemoteAddr() net.Addr             { return f.addr }
func (f *forwarded) SetDeadline(time.Time) error      { return nil }
func (f *forwarded) SetReadDeadline(time.Time) error  { return nil }
func (f *forwarded) SetWriteDeadline(time.Time) error { return nil }

type forwardAddr string

func (a forwardAddr) Network() string { return "portforward" }
func (a forwardAddr) String() string  { return string(a) }

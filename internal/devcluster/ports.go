package devcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"time"
)

// kwokctl picks its components' ports by counting down from 32767 and taking
// the first it can bind and close again, in every process afresh. Two
// clusters created at the same moment (two test packages, or a test beside
// `gantry dev`) therefore pick the same ports, and whichever component binds
// second exits or, worse, the other cluster's answers in its place: kwokctl
// reports both ready, with one cluster's API server on the other's etcd or
// without a scheduler of its own. So creations take turns: one holds a lock
// that every Gantry process on the machine shares until its components listen
// on their ports, and the next counts down past them.

// createLock is the lock's file, shared by every user of the machine: a
// fixed path, whatever TMPDIR says, so that every process finds the same.
const createLock = "/tmp/gantry-kwokctl-create.lock"

// lockCreate waits (until ctx ends) for the machine's cluster-creation lock
// and returns its release.
func lockCreate(ctx context.Context) (unlock func(), err error) {
	f, err := os.OpenFile(createLock, os.O_RDONLY|os.O_CREATE|syscall.O_NOFOLLOW, 0o644)
	if errors.Is(err, os.ErrPermission) {
		// Made by another user (fs.protected_regular refuses O_CREATE on
		// it): a read is enough for flock.
		f, err = os.OpenFile(createLock, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	}
	if err != nil {
		return nil, fmt.Errorf("the cluster-creation lock: %w", err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil // closing the file releases the lock
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			f.Close()
			return nil, fmt.Errorf("the cluster-creation lock %s: %w", createLock, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("waiting for another cluster's creation (lock %s): %w", createLock, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// portRE finds the components' ports in kwokctl's record of a cluster
// (clusters/<name>/kwok.yaml: etcdPort, kubeApiserverPort, …).
var portRE = regexp.MustCompile(`(?m)^\s+(\w+Port): (\d+)\s*$`)

// componentPorts are the loopback ports kwokctl gave the cluster's
// components, by option name.
func (c *Cluster) componentPorts() (map[string]int, error) {
	data, err := os.ReadFile(filepath.Join(c.workDir, "clusters", c.Name, "kwok.yaml"))
	if err != nil {
		return nil, err
	}
	ports := map[string]int{}
	for _, m := range portRE.FindAllStringSubmatch(string(data), -1) {
		if p, err := strconv.Atoi(m[2]); err == nil && p > 0 {
			ports[m[1]] = p
		}
	}
	if ports["kubeApiserverPort"] == 0 || ports["etcdPort"] == 0 {
		return nil, fmt.Errorf("no API server or etcd port in %s", filepath.Join(c.workDir, "clusters", c.Name, "kwok.yaml"))
	}
	return ports, nil
}

// waitListening waits until something listens on every component's port.
func (c *Cluster) waitListening(ctx context.Context) error {
	ports, err := c.componentPorts()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for name, port := range ports {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		for {
			conn, err := (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", addr)
			if err == nil {
				conn.Close()
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("nothing listens on %s (%s): %w", addr, name, err)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

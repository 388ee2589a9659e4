package devcluster

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// process is a controller the local cluster runs beside its control plane
// (Kueue, Karpenter): its output goes to a log file and the end of it is
// kept for errors.
type process struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	mu   sync.Mutex
	log  bytes.Buffer
}

// startProcess starts bin with args and extra environment, in its own
// process group (stop ends it and whatever it started). Its output is
// added to logFile: a process started again (Kueue after an outage) keeps
// what the one before it logged.
func startProcess(name, bin string, args, env []string, logFile string) (*process, error) {
	f, err := os.OpenFile(logFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	p := &process{name: name, done: make(chan struct{})}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	w := io.MultiWriter(f, writerFunc(func(b []byte) (int, error) {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.log.Len() < 1<<20 {
			p.log.Write(b)
		}
		return len(b), nil
	}))
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p.cmd = cmd
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// output is the end of what the process printed.
func (p *process) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.log.String()
	if len(s) > 2000 {
		s = s[len(s)-2000:]
	}
	return s
}

// stop ends the process and waits for it.
func (p *process) stop() {
	if p == nil || p.cmd == nil || p.cmd.Process == nil {
		return
	}
	select {
	case <-p.done:
		return // gone: its process group id may be someone else's by now
	default:
	}
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

package promtest

import "syscall"

// procAttr makes the kernel kill Prometheus when the test binary dies
// without running its cleanups (a panic, go test's timeout, SIGKILL). The
// signal is tied to the OS thread that started the process, which Go ends
// only when a goroutine locked to it exits; tests here lock none.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

//go:build !linux

package promtest

import "syscall"

// procAttr: only Linux has a parent-death signal.
func procAttr() *syscall.SysProcAttr { return nil }

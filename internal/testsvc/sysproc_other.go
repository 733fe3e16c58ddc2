//go:build !linux

package testsvc

import "syscall"

func sysProcAttr() *syscall.SysProcAttr { return nil }

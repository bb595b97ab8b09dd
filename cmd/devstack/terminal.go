package main

import (
	"os"
	"os/signal"
	"syscall"
	"unsafe"
)

// foregroundTerminal makes devstack's own process group the terminal's
// foreground, so that Ctrl-C reaches devstack alone: make, which would
// otherwise get it too and report an interrupted recipe whatever devstack
// does, only sees devstack exit 0 after a clean shutdown. The returned
// function gives the terminal back. Without a terminal (CI, tests) both do
// nothing.
func foregroundTerminal() (restore func()) {
	tty, err := os.OpenFile("/dev/tty", os.O_RDWR, 0)
	if err != nil {
		return func() {}
	}
	was, err := foreground(tty)
	if err != nil || syscall.Setpgid(0, 0) != nil {
		tty.Close()
		return func() {}
	}
	// A background group that sets the foreground gets SIGTTOU; it is
	// ours to ignore while we hand the terminal over and back.
	signal.Ignore(syscall.SIGTTOU)
	if setForeground(tty, syscall.Getpgrp()) != nil {
		tty.Close()
		return func() {}
	}
	return func() {
		_ = setForeground(tty, was)
		tty.Close()
	}
}

func foreground(tty *os.File) (int, error) {
	var pgid int32
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, tty.Fd(), syscall.TIOCGPGRP, uintptr(unsafe.Pointer(&pgid))); errno != 0 {
		return 0, errno
	}
	return int(pgid), nil
}

func setForeground(tty *os.File, pgid int) error {
	p := int32(pgid)
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, tty.Fd(), syscall.TIOCSPGRP, uintptr(unsafe.Pointer(&p))); errno != 0 {
		return errno
	}
	return nil
}

// Package sysmon keeps the Go runtime's system monitor from turning every
// request of a lightly loaded proxy into a burst of thread wakeups.
//
// The runtime's monitor thread (sysmon) sleeps deeply while every P is
// idle, and the first system call after that wakes it, resets its poll
// interval to 20 µs and lets it poll at that rate for a millisecond before
// it backs off (runtime/proc.go; golang/go#18236). A frontend serving
// requests one after another goes idle between every leg of every request
// (waiting for the client, then for the worker), so the monitor never backs
// off: it wakes at 20 µs intervals through every request, and each of those
// wakes is a context switch. Profiled on a 2-core VM with perf, the monitor
// and the wakeups of it were about a third of a bare Go proxy's CPU.
//
// With GODEBUG schedtrace set the monitor never sleeps deeply, so no
// system call wakes it and its interval backs off to 10 ms and stays there.
// A schedtrace period of 2^31-1 ms (24.8 days) prints no trace in practice;
// on a host that has been up longer than that, the runtime prints one
// "SCHED" line to stderr at start and then one every 24.8 days, because
// its first trace is due that long after boot.
//
// The runtime reads GODEBUG once, at start, so Quiet re-executes the
// binary with it set: the same process (same PID, open files and
// arguments) with a new image. SWITCHYARD_SYSMON=default keeps the
// runtime's behaviour.
package sysmon

import (
	"os"
	"strings"
	"syscall"
)

// Setting is the GODEBUG entry Quiet adds.
const Setting = "schedtrace=2147483647"

// Env is the environment variable that turns Quiet off ("default").
const Env = "SWITCHYARD_SYSMON"

// Quiet re-executes the running binary with Setting added to GODEBUG,
// unless GODEBUG names schedtrace already (the user's word, even 0) or
// SWITCHYARD_SYSMON is "default". It returns only when it does not
// re-execute, with the reason when the re-execution failed (the process
// then goes on as is).
func Quiet() error {
	godebug, ok := withSetting(os.Getenv("GODEBUG"), os.Getenv(Env))
	if !ok {
		return nil
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	// Replaced, not appended: Go's getenv and the runtime read the first
	// of two entries, and a second would re-execute forever.
	// SWITCHYARD_SYSMON=reexecuted guards against a loop should the new
	// image not see the setting.
	env := []string{"GODEBUG=" + godebug, Env + "=reexecuted"}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GODEBUG=") && !strings.HasPrefix(kv, Env+"=") {
			env = append(env, kv)
		}
	}
	return syscall.Exec(exe, os.Args, env)
}

// withSetting is the GODEBUG value to run with, and whether it differs from
// godebug (so a re-execution is needed).
func withSetting(godebug, mode string) (string, bool) {
	if mode == "default" || mode == "reexecuted" || mentions(godebug) {
		return godebug, false
	}
	if godebug == "" {
		return Setting, true
	}
	return godebug + "," + Setting, true
}

// mentions reports whether a GODEBUG value sets schedtrace at all.
func mentions(godebug string) bool {
	for _, kv := range strings.Split(godebug, ",") {
		if strings.HasPrefix(strings.TrimSpace(kv), "schedtrace=") {
			return true
		}
	}
	return false
}

//go:build !linux

package hugepage

// Advise is a no-op where madvise(MADV_HUGEPAGE) does not exist: tables
// use the platform's normal pages.
func Advise(b []byte) bool { return false }

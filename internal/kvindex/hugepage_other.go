//go:build !linux

package kvindex

// adviseHuge is a no-op where madvise(MADV_HUGEPAGE) does not exist: tables
// use the platform's normal pages.
func adviseHuge(b []byte) bool { return false }

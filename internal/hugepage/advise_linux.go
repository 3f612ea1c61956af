package hugepage

import (
	"syscall"
	"unsafe"
)

// Advise asks the kernel to back b with transparent huge pages and drops
// any pages b already has, so that the next touch faults in a 2 MiB page
// instead of keeping the 4 KiB pages the Go allocator may have zeroed b with
// (khugepaged would collapse those only minutes later). b must be Go memory
// the caller owns and has not yet written: after MADV_DONTNEED an anonymous
// private page reads as zero, which is what make promised.
//
// It reports whether the kernel took the advice. It fails when THP is
// compiled out or set to "never"; the table then runs on 4 KiB pages, which is
// correct and only slower.
func Advise(b []byte) bool {
	if len(b) == 0 || uintptr(unsafe.Pointer(&b[0]))%Size != 0 {
		return false
	}
	if err := syscall.Madvise(b, madvHugePage); err != nil {
		return false
	}
	// A failed DONTNEED leaves the 4 KiB pages in place: still correct.
	_ = syscall.Madvise(b, syscall.MADV_DONTNEED)
	return true
}

// madvHugePage is MADV_HUGEPAGE from <linux/mman.h>; package syscall names it
// only on some architectures.
const madvHugePage = 14

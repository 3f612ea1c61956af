// Package hugepage places large, long-lived, pointer-free tables on
// transparent huge pages (2 MiB), so that random reads across them miss the
// TLB far less often and their first touch faults once per 2 MiB instead of
// once per 4 KiB.
//
// It works on Go memory: a block allocated with make, one huge page larger
// than needed, whose 2 MiB-aligned interior is advised with
// madvise(MADV_HUGEPAGE). The garbage collector frees it like any other
// allocation, so nothing needs unmapping. On systems without THP (or with it
// set to "never") the memory is the same, on normal pages: correct and only
// slower.
//
// Alloc serves one table; an Arena carves many mid-sized tables (too small
// to align each on its own page) from shared huge-page chunks.
package hugepage

/* Memory helpers shared by the library. */
#ifndef ATTNCTL_MEMORY_H
#define ATTNCTL_MEMORY_H

#include <stddef.h>

/* Maps in the whole pages of [p, p + len) with one system call, for memory
 * that is about to be written in full. A page touched for the first time
 * costs a page fault; on the virtual machines measured here one costs about
 * 10 us, while prefaulting costs about 2 us a page. Only a hint: nothing
 * happens when the kernel lacks MADV_POPULATE_WRITE (Linux < 5.14). */
void ac_prefault_write(void *p, size_t len);

/* The same for a read-only file mapping that is about to be read in full
 * (MADV_POPULATE_READ: no copy, no zeroing). */
void ac_prefault_read(const void *p, size_t len);

/* Asks for transparent huge pages on the whole pages of [p, p + len), for
 * big blocks used over and over (activations): fewer TLB misses and page
 * faults. What glibc.malloc.hugetlb=1 does for every big malloc, for the
 * commands that run without it. Only a hint. */
void ac_advise_huge_pages(void *p, size_t len);

#endif

#include "attnctl/memory.h"

#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

/* Whole pages inside [p, p + len): 0 when there are none. */
static size_t inner_pages(const void *p, size_t len, uintptr_t *start)
{
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    if (page == 0 || (page & (page - 1)) != 0 || len < page)
        return 0;
    uintptr_t a = ((uintptr_t)p + page - 1) & ~(page - 1);
    uintptr_t b = ((uintptr_t)p + len) & ~(page - 1);
    *start = a;
    return b > a ? (size_t)(b - a) : 0;
}

static void advise(const void *p, size_t len, int advice)
{
    uintptr_t start;
    size_t bytes = inner_pages(p, len, &start);
    if (bytes)
        (void)madvise((void *)start, bytes, advice);
}

void ac_prefault_write(void *p, size_t len)
{
#ifdef MADV_POPULATE_WRITE
    advise(p, len, MADV_POPULATE_WRITE);
#else
    (void)p;
    (void)len;
#endif
}

void ac_prefault_read(const void *p, size_t len)
{
#ifdef MADV_POPULATE_READ
    advise(p, len, MADV_POPULATE_READ);
#else
    (void)p;
    (void)len;
#endif
}

void ac_advise_huge_pages(void *p, size_t len)
{
#ifdef MADV_HUGEPAGE
    advise(p, len, MADV_HUGEPAGE);
#else
    (void)p;
    (void)len;
#endif
}

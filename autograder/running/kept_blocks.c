/* Large blocks for a capped run, kept for reuse once freed (autograder/running/kept_blocks.py).

   Under the memory cap (transformer_lm/sandboxed/memory_cap.py) every block of 64 KiB or more is a
   mapping of its own, so that the kernel counts what is alive. glibc unmaps such a block when it is
   freed, and the next one of the same size is mapped again and faulted in page by page: a tiled
   attention pass at the capped checks' size spends most of its time there. Loaded into the grader's
   sandbox (LD_PRELOAD) and switched on by the cap, this allocator serves those blocks itself, one
   mapping each, and keeps up to a bounded number of bytes of freed ones for the next request of the
   same size: the most recently freed, the oldest given back to make room (a block of a size no loop asks
   for again would otherwise hold the room for good, and every tile after it be faulted in afresh). Kept blocks are mapped, so the kernel counts them: a run can hold nothing uncounted.
   Before any allocation is refused (a mapping, or glibc's malloc returning NULL), every kept block is
   given back and the allocation tried again, so what the cap refuses is what it refused without
   this allocator: an allocation that does not fit beside what is alive.

   Until kept_blocks_enable is called, every call goes to glibc unchanged. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_memalign(size_t, size_t);

#define HEADER 64      /* a block's pointer: its mapping's start plus this, 64-byte aligned as PyTorch asks */
#define SLOTS 8192     /* the live blocks' table (a capped run holds at most a few hundred) */
#define KEPT 64        /* freed blocks kept at most, by count */
#define PAGE 4096

static size_t threshold;        /* 0: off; else the size from which a block is served here */
static size_t kept_limit;       /* freed blocks kept at most, by bytes */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static uintptr_t live[SLOTS];   /* mapping starts, open addressing; 0: empty */
static size_t live_length[SLOTS];
static uintptr_t kept[KEPT];
static size_t kept_length[KEPT];
static size_t kept_count, kept_bytes;

static void *system_mmap(void *address, size_t length, int prot, int flags, int fd, off_t offset) {
    return (void *)syscall(SYS_mmap, address, length, prot, flags, fd, offset);
}

static size_t slot_of(uintptr_t base) { return (size_t)((base >> 12) * 11400714819323198485ull % SLOTS); }

static int live_add(uintptr_t base, size_t length) {
    for (size_t i = slot_of(base), n = 0; n < SLOTS; i = (i + 1) % SLOTS, n++)
        if (!live[i]) {
            live[i] = base;
            live_length[i] = length;
            return 1;
        }
    return 0;
}

static size_t live_find(uintptr_t base, size_t *slot) {
    for (size_t i = slot_of(base), n = 0; n < SLOTS && live[i]; i = (i + 1) % SLOTS, n++)
        if (live[i] == base) {
            *slot = i;
            return live_length[i];
        }
    return 0;
}

static void live_remove(size_t hole) {   /* linear probing's deletion: later entries of the run move back */
    live[hole] = 0;
    for (size_t i = (hole + 1) % SLOTS; live[i]; i = (i + 1) % SLOTS) {
        size_t home = slot_of(live[i]);
        if ((i > hole && (home <= hole || home > i)) || (i < hole && home <= hole && home > i)) {
            live[hole] = live[i];
            live_length[hole] = live_length[i];
            live[i] = 0;
            hole = i;
        }
    }
}

static int drop_kept(void) {   /* with the lock held; whether anything was given back */
    int dropped = kept_count > 0;
    while (kept_count) {
        kept_count--;
        munmap((void *)kept[kept_count], kept_length[kept_count]);
    }
    kept_bytes = 0;
    return dropped;
}

static int drop_kept_locked(void) {
    pthread_mutex_lock(&lock);
    int dropped = drop_kept();
    pthread_mutex_unlock(&lock);
    return dropped;
}

/* ``call`` (to glibc), made again once every kept block is given back, where it gave NULL while some were kept */
#define AGAIN_IF_NULL(call) ({ void *first_try = (call); first_try || !drop_kept_locked() ? first_try : (call); })

static uintptr_t map_block(size_t length) {   /* a fresh private mapping, or 0 */
    void *mapped = system_mmap(NULL, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return mapped == MAP_FAILED ? 0 : (uintptr_t)mapped;
}

static void forget_kept(size_t i) {   /* with the lock held: entry i leaves the list, the order of the rest kept */
    kept_bytes -= kept_length[i];
    kept_count--;
    memmove(&kept[i], &kept[i + 1], (kept_count - i) * sizeof kept[0]);
    memmove(&kept_length[i], &kept_length[i + 1], (kept_count - i) * sizeof kept_length[0]);
}

static uintptr_t take_kept(size_t length) {   /* the most recently freed block of this length, or 0 */
    for (size_t i = kept_count; i-- > 0;)
        if (kept_length[i] == length) {
            uintptr_t base = kept[i];
            forget_kept(i);
            return base;
        }
    return 0;
}

static void keep(uintptr_t base, size_t length) {   /* with the lock held: the oldest kept blocks make room */
    if (length > kept_limit) {
        munmap((void *)base, length);
        return;
    }
    while (kept_count == KEPT || kept_bytes + length > kept_limit) {
        munmap((void *)kept[0], kept_length[0]);
        forget_kept(0);
    }
    kept[kept_count] = base;
    kept_length[kept_count++] = length;
    kept_bytes += length;
}

static void *served(size_t size, int zeroed) {
    if (size > SIZE_MAX - HEADER - PAGE) {
        errno = ENOMEM;
        return NULL;
    }
    size_t length = (size + HEADER + PAGE - 1) / PAGE * PAGE;
    pthread_mutex_lock(&lock);
    uintptr_t base = take_kept(length);
    if (base && zeroed)
        memset((void *)(base + HEADER), 0, size);
    if (!base)
        base = map_block(length);
    if (!base && drop_kept())
        base = map_block(length);
    int listed = base && live_add(base, length);
    if (base && !listed)
        munmap((void *)base, length);
    pthread_mutex_unlock(&lock);
    if (base && !listed)   /* the table is full (never under a cap of MiBs): glibc serves it */
        return zeroed ? __libc_calloc(1, size) : __libc_memalign(HEADER, size);
    if (!base) {
        errno = ENOMEM;
        return NULL;
    }
    return (void *)(base + HEADER);
}

static size_t released(void *pointer) {   /* the block's length if it was served here, else 0 */
    uintptr_t base = (uintptr_t)pointer - HEADER;
    size_t slot, length;
    if (!pointer || base % PAGE)
        return 0;
    pthread_mutex_lock(&lock);
    length = live_find(base, &slot);
    if (length) {
        live_remove(slot);
        keep(base, length);
    }
    pthread_mutex_unlock(&lock);
    return length;
}

static size_t usable(void *pointer) {   /* what a block served here holds, else 0 */
    uintptr_t base = (uintptr_t)pointer - HEADER;
    size_t slot, length = 0;
    if (pointer && base % PAGE == 0) {
        pthread_mutex_lock(&lock);
        length = live_find(base, &slot);
        pthread_mutex_unlock(&lock);
    }
    return length ? length - HEADER : 0;
}

void kept_blocks_enable(size_t from_bytes, size_t keep_bytes) {
    pthread_mutex_lock(&lock);
    threshold = from_bytes;
    kept_limit = keep_bytes;
    pthread_mutex_unlock(&lock);
}

size_t kept_blocks_kept(void) { return kept_bytes; }   /* what is kept now: for the tests */

void *malloc(size_t size) {
    if (threshold && size >= threshold)
        return served(size, 0);
    return AGAIN_IF_NULL(__libc_malloc(size));
}

void *calloc(size_t count, size_t size) {
    if (threshold && size && count <= SIZE_MAX / size && count * size >= threshold)
        return served(count * size, 1);
    return AGAIN_IF_NULL(__libc_calloc(count, size));
}

void free(void *pointer) {
    if (!released(pointer))
        __libc_free(pointer);
}

void *memalign(size_t alignment, size_t size) {
    if (threshold && size >= threshold && alignment <= HEADER)
        return served(size, 0);
    return AGAIN_IF_NULL(__libc_memalign(alignment, size));
}

int posix_memalign(void **out, size_t alignment, size_t size) {
    if (alignment < sizeof(void *) || (alignment & (alignment - 1)))
        return EINVAL;
    void *pointer = memalign(alignment, size);
    if (!pointer)
        return ENOMEM;
    *out = pointer;
    return 0;
}

void *aligned_alloc(size_t alignment, size_t size) { return memalign(alignment, size); }

void *realloc(void *pointer, size_t size) {
    size_t held = usable(pointer);
    if (!held)   /* with size 0, glibc frees the block and gives NULL: nothing to try again */
        return size ? AGAIN_IF_NULL(__libc_realloc(pointer, size)) : __libc_realloc(pointer, size);
    void *moved = malloc(size);
    if (moved) {
        memcpy(moved, pointer, size < held ? size : held);
        free(pointer);
    }
    return moved;
}

void *reallocarray(void *pointer, size_t count, size_t size) {
    if (size && count > SIZE_MAX / size) {
        errno = ENOMEM;
        return NULL;
    }
    return realloc(pointer, count * size);
}

size_t malloc_usable_size(void *pointer) {
    static size_t (*glibc_usable)(void *);
    size_t held = usable(pointer);
    if (held || !pointer)
        return held;
    if (!glibc_usable)
        glibc_usable = (size_t (*)(void *))dlsym(RTLD_NEXT, "malloc_usable_size");
    return glibc_usable(pointer);
}

void *mmap(void *address, size_t length, int prot, int flags, int fd, off_t offset) {
    void *mapped = system_mmap(address, length, prot, flags, fd, offset);
    if (mapped == MAP_FAILED && errno == ENOMEM && drop_kept_locked())
        mapped = system_mmap(address, length, prot, flags, fd, offset);
    return mapped;
}

void *mmap64(void *address, size_t length, int prot, int flags, int fd, off_t offset)
    __attribute__((alias("mmap")));

static void before_fork(void) { pthread_mutex_lock(&lock); }
static void after_fork(void) { pthread_mutex_unlock(&lock); }

__attribute__((constructor)) static void kept_blocks_start(void) {
    pthread_atfork(before_fork, after_fork, after_fork);
}

/* smartarray's fake CUDA driver: a stand-in libcuda.so.1 for testing without a GPU.
 *
 * cuda-bindings dlopens "libcuda.so.1", looks up cuGetProcAddress_v2 with dlsym and fetches
 * every other entry point through it. This shim exports only those lookups (and the few
 * entries a loader may dlsym directly); each answer comes from a resolver that Python
 * installs (smartarray._fakegpu.driver), which returns ctypes callbacks implementing the
 * driver's semantics. Names the resolver does not know are reported absent, as a real
 * driver does for entry points newer than itself.
 *
 * Build by hand: gcc -shared -fPIC -O1 -Wl,-soname,libcuda.so.1 -o libcuda.so.1 fake_cuda.c
 */
#include <stddef.h>
#include <stdint.h>

/* The resolver gets cuGetProcAddress's flags: with CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
 * (what cuda-bindings asks for under CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM=1) it answers the
 * per-thread default stream variants (_ptds / _ptsz), in which handle 0 is the calling thread's
 * own stream. */
typedef void *(*fakecuda_resolver_t)(const char *symbol, uint64_t flags);

static fakecuda_resolver_t resolver = NULL;

/* Every entry handed out is a C guard that forwards to the Python callback in its slot while
 * Python runs, and returns CUDA_ERROR_DEINITIALIZED once Python has shut down (cuda.core
 * releases contexts from C++ thread-local destructors after the interpreter is gone). All
 * driver entries take integer or pointer arguments, so forwarding twelve 64-bit integer
 * arguments passes any of them unchanged under the x86-64 and AArch64 calling conventions. */
#define CUDA_ERROR_DEINITIALIZED 4
#define NSLOTS 512
typedef uint64_t u64;
typedef int (*entry_t)(u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64);
static entry_t slots[NSLOTS];
static int nslots = 0;
static volatile int alive = 1;

#define GUARD(n)                                                                            \
    static int guard_##n(u64 a, u64 b, u64 c, u64 d, u64 e, u64 f, u64 g, u64 h, u64 i,      \
                         u64 j, u64 k, u64 l) {                                             \
        return alive ? slots[n](a, b, c, d, e, f, g, h, i, j, k, l) : CUDA_ERROR_DEINITIALIZED; \
    }
#define G8(n) GUARD(n##0) GUARD(n##1) GUARD(n##2) GUARD(n##3) GUARD(n##4) GUARD(n##5) GUARD(n##6) GUARD(n##7)
#define G64(n) G8(n##0) G8(n##1) G8(n##2) G8(n##3) G8(n##4) G8(n##5) G8(n##6) G8(n##7)
#define G512(n) G64(n##0) G64(n##1) G64(n##2) G64(n##3) G64(n##4) G64(n##5) G64(n##6) G64(n##7)
/* guard_0000 .. guard_0777: the leading 0 makes each index an octal literal, 0 .. 511. */
G512(0)
#define R(n) guard_##n,
#define R8(n) R(n##0) R(n##1) R(n##2) R(n##3) R(n##4) R(n##5) R(n##6) R(n##7)
#define R64(n) R8(n##0) R8(n##1) R8(n##2) R8(n##3) R8(n##4) R8(n##5) R8(n##6) R8(n##7)
#define R512(n) R64(n##0) R64(n##1) R64(n##2) R64(n##3) R64(n##4) R64(n##5) R64(n##6) R64(n##7)
static entry_t guards[NSLOTS] = {R512(0)};

static void *guarded(void *target) {
    if (target == NULL) return NULL;
    for (int i = 0; i < nslots; i++)
        if ((void *)slots[i] == target) return (void *)guards[i];
    if (nslots == NSLOTS) return NULL;
    slots[nslots] = (entry_t)target;
    return (void *)guards[nslots++];
}

void fakecuda_shutdown(void) { alive = 0; }

#define CUDA_SUCCESS 0
#define CUDA_ERROR_NOT_INITIALIZED 3
#define CUDA_ERROR_NOT_FOUND 500
#define CU_GET_PROC_ADDRESS_SUCCESS 0
#define CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND 1

void fakecuda_set_resolver(fakecuda_resolver_t fn) { resolver = fn; }

int fakecuda_is_fake(void) { return 1; }

int cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, uint64_t flags,
                        int *symbolStatus) {
    (void)cudaVersion;
    if (!alive) return CUDA_ERROR_DEINITIALIZED;
    void *found = (resolver != NULL && symbol != NULL) ? guarded(resolver(symbol, flags)) : NULL;
    if (pfn != NULL) *pfn = found;
    if (symbolStatus != NULL)
        *symbolStatus = found ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return found ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

int cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, uint64_t flags) {
    return cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, NULL);
}

typedef int (*int_out_fn)(int *);
typedef int (*flags_fn)(unsigned int);

int cuDriverGetVersion(int *version) {
    int_out_fn fn = (resolver && alive) ? (int_out_fn)resolver("cuDriverGetVersion", 0) : NULL;
    return fn ? fn(version) : CUDA_ERROR_NOT_INITIALIZED;
}

int cuInit(unsigned int flags) {
    flags_fn fn = (resolver && alive) ? (flags_fn)resolver("cuInit", 0) : NULL;
    return fn ? fn(flags) : CUDA_ERROR_NOT_INITIALIZED;
}

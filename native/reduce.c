/* Reduction kernels: dst[i] = dst[i] op src[i], and the fused
 * dst[i] = a[i] op b[i] (one pass instead of a copy and a pass), for every
 * element type and operation. Plain loops over restrict pointers, which the compiler
 * vectorises; the collectives are memory-bound, so nothing fancier pays. */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "internal.h"

#pragma GCC optimize("O3")

#define SUM(a, b) ((a) + (b))
#define PROD(a, b) ((a) * 1u * (b)) /* unsigned, never an int overflow */
#define MIN(a, b) ((b) < (a) ? (b) : (a))
#define MAX(a, b) ((b) > (a) ? (b) : (a))
#define BAND(a, b) ((a) & (b))
#define BOR(a, b) ((a) | (b))
#define BXOR(a, b) ((a) ^ (b))

#define KERNEL(T, NAME, OP)                                                          \
    static void NAME(void *restrict dst_, const void *restrict src_, size_t n)       \
    {                                                                                 \
        T *restrict dst = dst_;                                                       \
        const T *restrict src = src_;                                                 \
        for (size_t i = 0; i < n; i++)                                                \
            dst[i] = (T)OP(dst[i], src[i]);                                           \
    }                                                                                 \
    static void NAME##_pair(void *dst_, const void *a_, const void *b_, size_t n)    \
    {   /* no restrict: dst may be a or b (gcc checks and still vectorises) */       \
        T *dst = dst_;                                                                \
        const T *a = a_, *b = b_;                                                     \
        for (size_t i = 0; i < n; i++)                                                \
            dst[i] = (T)OP(a[i], b[i]);                                               \
    }

#define ORDER_KERNELS(T, P)                                                          \
    KERNEL(T, P##_min, MIN)                                                           \
    KERNEL(T, P##_max, MAX)
#define ARITH_KERNELS(T, P)                                                          \
    KERNEL(T, P##_sum, SUM)                                                           \
    KERNEL(T, P##_prod, PROD)                                                         \
    ORDER_KERNELS(T, P)
#define BIT_KERNELS(T, P)                                                            \
    KERNEL(T, P##_band, BAND)                                                         \
    KERNEL(T, P##_bor, BOR)                                                           \
    KERNEL(T, P##_bxor, BXOR)
#define INT_KERNELS(T, P) ARITH_KERNELS(T, P) BIT_KERNELS(T, P)

/* Signed overflow in sum/prod wraps like numpy's, computed on the unsigned
 * type so the C is defined. */
INT_KERNELS(uint8_t, u8)
INT_KERNELS(uint16_t, u16)
INT_KERNELS(uint32_t, u32)
INT_KERNELS(uint64_t, u64)
ORDER_KERNELS(int8_t, i8)
ORDER_KERNELS(int16_t, i16)
ORDER_KERNELS(int32_t, i32)
ORDER_KERNELS(int64_t, i64)
ARITH_KERNELS(float, f32)
ARITH_KERNELS(double, f64)

typedef void (*kernel_fn)(void *restrict, const void *restrict, size_t);
typedef void (*pair_fn)(void *, const void *, const void *, size_t);

/* Rows of a table by element type, columns by operation; X: the name suffix. */
#define ROW_INT(S, U, X) {U##_sum##X, U##_prod##X, S##_min##X, S##_max##X, U##_band##X, U##_bor##X, U##_bxor##X}
#define ROW_UINT(U, X) ROW_INT(U, U, X)
#define ROW_FLOAT(F, X) {F##_sum##X, F##_prod##X, F##_min##X, F##_max##X, NULL, NULL, NULL}
#define TABLE(X)                                                                     \
    {                                                                                 \
        [SHMTOPO_INT8] = ROW_INT(i8, u8, X),    [SHMTOPO_INT16] = ROW_INT(i16, u16, X), \
        [SHMTOPO_INT32] = ROW_INT(i32, u32, X), [SHMTOPO_INT64] = ROW_INT(i64, u64, X), \
        [SHMTOPO_UINT8] = ROW_UINT(u8, X),      [SHMTOPO_UINT16] = ROW_UINT(u16, X),    \
        [SHMTOPO_UINT32] = ROW_UINT(u32, X),    [SHMTOPO_UINT64] = ROW_UINT(u64, X),    \
        [SHMTOPO_FLOAT32] = ROW_FLOAT(f32, X),  [SHMTOPO_FLOAT64] = ROW_FLOAT(f64, X),  \
    }

static const kernel_fn kernels[10][7] = TABLE();
static const pair_fn pairs[10][7] = TABLE(_pair);

static const size_t sizes[10] = {1, 2, 4, 8, 1, 2, 4, 8, 4, 8};

size_t shmtopo_dtype_size(int dtype)
{
    return dtype >= 0 && dtype < 10 ? sizes[dtype] : 0;
}

int shmtopo_reduce_check(int dtype, int op)
{
    if (dtype < 0 || dtype >= 10)
        return shmtopo_fail(EINVAL, -1, "unknown element type %d", dtype);
    if (op < 0 || op >= 7)
        return shmtopo_fail(EINVAL, -1, "unknown reduction operation %d", op);
    if (!kernels[dtype][op])
        return shmtopo_fail(EINVAL, -1, "bitwise operations need an integer type");
    return 0;
}

void shmtopo_reduce_into(void *dst, const void *src, size_t count, int dtype, int op)
{
    kernels[dtype][op](dst, src, count);
}

void shmtopo_reduce_pair(void *dst, const void *a, const void *b, size_t count, int dtype, int op)
{
    pairs[dtype][op](dst, a, b, count);
}

int shmtopo_reduce_local(void *dst, const void *src, size_t count, int dtype, int op)
{
    if (shmtopo_reduce_check(dtype, op) < 0)
        return -1;
    shmtopo_reduce_into(dst, src, count, dtype, op);
    return 0;
}

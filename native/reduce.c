/* Reduction kernels: dst[i] = dst[i] op src[i] for every element type and
 * operation. Plain loops over restrict pointers, which the compiler
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

#define ROW_INT(S, U) {U##_sum, U##_prod, S##_min, S##_max, U##_band, U##_bor, U##_bxor}
#define ROW_UINT(U) {U##_sum, U##_prod, U##_min, U##_max, U##_band, U##_bor, U##_bxor}
#define ROW_FLOAT(F) {F##_sum, F##_prod, F##_min, F##_max, NULL, NULL, NULL}

static const kernel_fn kernels[10][7] = {
    [SHMTOPO_INT8] = ROW_INT(i8, u8),      [SHMTOPO_INT16] = ROW_INT(i16, u16),
    [SHMTOPO_INT32] = ROW_INT(i32, u32),   [SHMTOPO_INT64] = ROW_INT(i64, u64),
    [SHMTOPO_UINT8] = ROW_UINT(u8),        [SHMTOPO_UINT16] = ROW_UINT(u16),
    [SHMTOPO_UINT32] = ROW_UINT(u32),      [SHMTOPO_UINT64] = ROW_UINT(u64),
    [SHMTOPO_FLOAT32] = ROW_FLOAT(f32),    [SHMTOPO_FLOAT64] = ROW_FLOAT(f64),
};

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

int shmtopo_reduce_local(void *dst, const void *src, size_t count, int dtype, int op)
{
    if (shmtopo_reduce_check(dtype, op) < 0)
        return -1;
    shmtopo_reduce_into(dst, src, count, dtype, op);
    return 0;
}

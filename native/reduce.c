/* Reduction kernels: dst[i] = dst[i] op src[i], and the fused
 * dst[i] = a[i] op b[i] (one pass instead of a copy and a pass), for every
 * element type and operation, in one table. Plain loops over restrict pointers, which the compiler
 * vectorises; the collectives are memory-bound, so nothing fancier pays.
 *
 * 16-bit floats (float16, bfloat16) are reduced in a float32 accumulator:
 * the acc_* entries below widen each input exactly as they fold it, and
 * shmtopo_reduce_round rounds the accumulator once, to nearest even, after
 * the last rank's input (for every other type the accumulator is the type
 * itself and the acc_* entries are the plain kernels). */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "internal.h"

#pragma GCC optimize("O3")
/* a * b - c * d must mean the same on every machine (no fused multiply-add
 * where the CPU has one): results then match across builds and numpy's
 * elementwise arithmetic */
#pragma GCC optimize("fp-contract=off")

#define SUM(a, b) ((a) + (b))
#define PROD(a, b) ((a) * 1u * (b)) /* unsigned, never an int overflow */
#define MIN(a, b) ((b) < (a) ? (b) : (a))
#define MAX(a, b) ((b) > (a) ? (b) : (a))
#define BAND(a, b) ((a) & (b))
#define BOR(a, b) ((a) | (b))
#define BXOR(a, b) ((a) ^ (b))
/* MPI's LAND, LOR, LXOR: 0 or 1 of the element type */
#define LAND(a, b) ((a) && (b))
#define LOR(a, b) ((a) || (b))
#define LXOR(a, b) (!(a) != !(b))
/* MPI's MAXLOC / MINLOC on (value, index): the larger (smaller) value; on
 * equal values the smaller index */
#define MAXLOC(a, b) ((b).value > (a).value || ((b).value == (a).value && (b).index < (a).index) ? (b) : (a))
#define MINLOC(a, b) ((b).value < (a).value || ((b).value == (a).value && (b).index < (a).index) ? (b) : (a))

/* Complex numbers as pairs of reals: the textbook product, without C's
 * Annex G recovery of infinities (numpy's and MPI's meaning). */
typedef struct c64 { float re, im; } c64_t;
typedef struct c128 { double re, im; } c128_t;
#define CSUM(a, b) {(a).re + (b).re, (a).im + (b).im}
#define CPROD(a, b) {(a).re * (b).re - (a).im * (b).im, (a).re * (b).im + (a).im * (b).re}

/* ---- 16-bit floats ---------------------------------------------------------------- */

static inline float float_of_bits(uint32_t x)
{
    float f;
    memcpy(&f, &x, sizeof(f));
    return f;
}

static inline uint32_t bits_of_float(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof(x));
    return x;
}

/* float16 -> float32, exact (NaN payloads kept). Branch-free, so the
 * folding loops still vectorise. */
static inline float f16_widen(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, mag = h & 0x7fffu;
    const uint32_t normal = (mag << 13) + ((127u - 15u) << 23);      /* rebias the exponent */
    const uint32_t special = normal + ((255u - 31u - (127u - 15u)) << 23); /* inf, NaN: exponent all ones */
    /* a subnormal m * 2^-24 (m < 1024) is a float32 exactly */
    const uint32_t tiny = bits_of_float((float)(int32_t)mag * 0x1p-24f);
    return float_of_bits(sign | (mag < 0x400u ? tiny : mag >= 0x7c00u ? special : normal));
}

/* float32 -> float16, to nearest even; too large: inf. NaN as numpy does
 * (payload truncated, kept a NaN), so results match numpy's astype. */
static inline uint16_t f16_round(float f)
{
    const uint32_t x = bits_of_float(f), sign = (x >> 16) & 0x8000u, mag = x & 0x7fffffffu;
    if (mag >= 0x7f800000u) { /* inf or NaN */
        uint32_t h = 0x7c00u | ((mag & 0x7fffffu) >> 13);
        return (uint16_t)(sign | (mag > 0x7f800000u && h == 0x7c00u ? h + 1 : h));
    }
    if (mag >= 0x477ff000u) /* from halfway past 65504 on: inf */
        return (uint16_t)(sign | 0x7c00u);
    if (mag >= 0x38800000u) { /* a normal float16: rebias, round off 13 bits (a carry may bump the exponent) */
        const uint32_t r = mag - ((127u - 15u) << 23);
        return (uint16_t)(sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13));
    }
    if (mag <= 0x33000000u) /* at most half the smallest subnormal: zero (ties to even) */
        return (uint16_t)sign;
    /* subnormal: the significand (with its leading 1) shifted down to units of 2^-24 */
    const uint32_t m = (mag & 0x7fffffu) | 0x800000u, shift = 126u - (mag >> 23);
    const uint32_t q = m >> shift, rest = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    return (uint16_t)(sign | (q + (rest > half || (rest == half && (q & 1u)))));
}

/* bfloat16 -> float32: the upper half of a float32 */
static inline float bf16_widen(uint16_t h)
{
    return float_of_bits((uint32_t)h << 16);
}

/* float32 -> bfloat16, to nearest even (overflow gives inf naturally); NaN
 * as ml_dtypes does (the quiet NaN of its sign). */
static inline uint16_t bf16_round(float f)
{
    const uint32_t x = bits_of_float(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)(((x >> 16) & 0x8000u) | 0x7fc0u);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/* ---- the kernels ------------------------------------------------------------------ */

/* Elements stored as S; LOAD turns one into the type the operation works
 * in, STORE turns a result back (a cast, or nothing for structs). */
#define KERNEL_AS(S, NAME, OP, LOAD, STORE)                                          \
    static void NAME(void *restrict dst_, const void *restrict src_, size_t n)       \
    {                                                                                 \
        S *restrict dst = dst_;                                                       \
        const S *restrict src = src_;                                                 \
        for (size_t i = 0; i < n; i++) {                                              \
            const S r = STORE(OP(LOAD(dst[i]), LOAD(src[i])));                        \
            dst[i] = r;                                                               \
        }                                                                             \
    }                                                                                 \
    static void NAME##_pair(void *dst_, const void *a_, const void *b_, size_t n)    \
    {   /* no restrict: dst may be a or b (gcc checks and still vectorises) */       \
        S *dst = dst_;                                                                \
        const S *a = a_, *b = b_;                                                     \
        for (size_t i = 0; i < n; i++) {                                              \
            const S r = STORE(OP(LOAD(a[i]), LOAD(b[i])));                            \
            dst[i] = r;                                                               \
        }                                                                             \
    }
#define KERNEL(T, NAME, OP) KERNEL_AS(T, NAME, OP, , (T))
#define STRUCT_KERNEL(T, NAME, OP) KERNEL_AS(T, NAME, OP, , )

/* A 16-bit type's folding into its float32 accumulator, beside its own
 * kernels (which round after each operation: shmtopo_reduce_local). */
#define HALF_KERNEL(P, NAME, OP)                                                     \
    KERNEL_AS(uint16_t, NAME, OP, P##_widen, P##_round)                               \
    static void NAME##_acc(void *restrict acc_, const void *restrict src_, size_t n) \
    {                                                                                 \
        float *restrict acc = acc_;                                                   \
        const uint16_t *restrict src = src_;                                          \
        for (size_t i = 0; i < n; i++)                                                \
            acc[i] = OP(acc[i], P##_widen(src[i]));                                   \
    }                                                                                 \
    static void NAME##_acc_pair(void *acc_, const void *a_, const void *b_, size_t n)  \
    {                                                                                 \
        float *acc = acc_;                                                            \
        const uint16_t *a = a_, *b = b_;                                              \
        for (size_t i = 0; i < n; i++)                                                \
            acc[i] = OP(P##_widen(a[i]), P##_widen(b[i]));                            \
    }
#define HALF_KERNELS(P)                                                              \
    HALF_KERNEL(P, P##_sum, SUM)                                                      \
    HALF_KERNEL(P, P##_prod, PROD)                                                    \
    HALF_KERNEL(P, P##_min, MIN)                                                      \
    HALF_KERNEL(P, P##_max, MAX)

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
#define LOGIC_KERNELS(T, P)                                                          \
    KERNEL(T, P##_land, LAND)                                                         \
    KERNEL(T, P##_lor, LOR)                                                           \
    KERNEL(T, P##_lxor, LXOR)
#define INT_KERNELS(T, P) ARITH_KERNELS(T, P) BIT_KERNELS(T, P) LOGIC_KERNELS(T, P)
#define LOC_KERNELS(T, P)                                                            \
    STRUCT_KERNEL(T, P##_maxloc, MAXLOC)                                              \
    STRUCT_KERNEL(T, P##_minloc, MINLOC)
#define COMPLEX_KERNELS(T, P)                                                        \
    static inline T P##_add(T a, T b) { const T r = CSUM(a, b); return r; }           \
    static inline T P##_mul(T a, T b) { const T r = CPROD(a, b); return r; }          \
    STRUCT_KERNEL(T, P##_sum, P##_add)                                                \
    STRUCT_KERNEL(T, P##_prod, P##_mul)

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
COMPLEX_KERNELS(c64_t, c64)
COMPLEX_KERNELS(c128_t, c128)
HALF_KERNELS(f16)
HALF_KERNELS(bf16)
LOC_KERNELS(shmtopo_float_int_t, fi)
LOC_KERNELS(shmtopo_double_int_t, di)
LOC_KERNELS(shmtopo_long_int_t, li)
LOC_KERNELS(shmtopo_2int_t, ii)
LOC_KERNELS(shmtopo_short_int_t, si)

typedef void (*kernel_fn)(void *restrict, const void *restrict, size_t);
typedef void (*pair_fn)(void *, const void *, const void *, size_t);

/* One entry of the table: dst op= src, dst = a op b, and (16-bit types
 * only) the same into a float32 accumulator. */
typedef struct kernels {
    kernel_fn into;
    pair_fn pair;
    kernel_fn acc_into;
    pair_fn acc_pair;
} kernels_t;

#define K(F) {F, F##_pair, NULL, NULL}
#define KH(F) {F, F##_pair, F##_acc, F##_acc_pair}
#define NONE {NULL, NULL, NULL, NULL}

/* Rows by element type, columns by operation (enum shmtopo_op order:
 * sum prod min max band bor bxor land lor lxor maxloc minloc). Signed
 * integers share the unsigned kernels but for min and max. bool's bitwise
 * ops are its logical ones (0/1 whatever nonzero byte was stored), as in numpy. */
#define ROW_INT(S, U)                                                                \
    {K(U##_sum), K(U##_prod), K(S##_min), K(S##_max), K(U##_band), K(U##_bor), K(U##_bxor),  \
     K(U##_land), K(U##_lor), K(U##_lxor), NONE, NONE}
#define ROW_FLOAT(F) {K(F##_sum), K(F##_prod), K(F##_min), K(F##_max), NONE, NONE, NONE, NONE, NONE, NONE, NONE, NONE}
#define ROW_HALF(F) {KH(F##_sum), KH(F##_prod), KH(F##_min), KH(F##_max), NONE, NONE, NONE, NONE, NONE, NONE, NONE, NONE}
#define ROW_COMPLEX(C) {K(C##_sum), K(C##_prod), NONE, NONE, NONE, NONE, NONE, NONE, NONE, NONE, NONE, NONE}
#define ROW_LOC(L) {NONE, NONE, NONE, NONE, NONE, NONE, NONE, NONE, NONE, NONE, K(L##_maxloc), K(L##_minloc)}

static const kernels_t table[SHMTOPO_NDTYPES][SHMTOPO_NOPS] = {
    [SHMTOPO_INT8] = ROW_INT(i8, u8),    [SHMTOPO_INT16] = ROW_INT(i16, u16),
    [SHMTOPO_INT32] = ROW_INT(i32, u32), [SHMTOPO_INT64] = ROW_INT(i64, u64),
    [SHMTOPO_UINT8] = ROW_INT(u8, u8),   [SHMTOPO_UINT16] = ROW_INT(u16, u16),
    [SHMTOPO_UINT32] = ROW_INT(u32, u32), [SHMTOPO_UINT64] = ROW_INT(u64, u64),
    [SHMTOPO_FLOAT32] = ROW_FLOAT(f32),  [SHMTOPO_FLOAT64] = ROW_FLOAT(f64),
    [SHMTOPO_BOOL] = {NONE, NONE, NONE, NONE, K(u8_land), K(u8_lor), K(u8_lxor),
                      K(u8_land), K(u8_lor), K(u8_lxor), NONE, NONE},
    [SHMTOPO_COMPLEX64] = ROW_COMPLEX(c64), [SHMTOPO_COMPLEX128] = ROW_COMPLEX(c128),
    [SHMTOPO_FLOAT16] = ROW_HALF(f16),   [SHMTOPO_BFLOAT16] = ROW_HALF(bf16),
    [SHMTOPO_FLOAT_INT] = ROW_LOC(fi),   [SHMTOPO_DOUBLE_INT] = ROW_LOC(di),
    [SHMTOPO_LONG_INT] = ROW_LOC(li),    [SHMTOPO_2INT] = ROW_LOC(ii),
    [SHMTOPO_SHORT_INT] = ROW_LOC(si),
};

/* Per element type: its size, name (for messages) and what kind of values
 * it holds (which ops it takes, for the message when one does not). */
static const struct dtype_info {
    size_t size;
    const char *name;
    const char *ops;
} types[SHMTOPO_NDTYPES] = {
#define INT_OPS "sum, prod, min, max, band, bor, bxor, land, lor, lxor"
    [SHMTOPO_INT8] = {1, "int8", INT_OPS},       [SHMTOPO_INT16] = {2, "int16", INT_OPS},
    [SHMTOPO_INT32] = {4, "int32", INT_OPS},     [SHMTOPO_INT64] = {8, "int64", INT_OPS},
    [SHMTOPO_UINT8] = {1, "uint8", INT_OPS},     [SHMTOPO_UINT16] = {2, "uint16", INT_OPS},
    [SHMTOPO_UINT32] = {4, "uint32", INT_OPS},   [SHMTOPO_UINT64] = {8, "uint64", INT_OPS},
    [SHMTOPO_FLOAT32] = {4, "float32", "sum, prod, min, max"},
    [SHMTOPO_FLOAT64] = {8, "float64", "sum, prod, min, max"},
    [SHMTOPO_BOOL] = {1, "bool", "land, lor, lxor, band, bor, bxor"},
    [SHMTOPO_COMPLEX64] = {8, "complex64", "sum, prod"},
    [SHMTOPO_COMPLEX128] = {16, "complex128", "sum, prod"},
    [SHMTOPO_FLOAT16] = {2, "float16", "sum, prod, min, max"},
    [SHMTOPO_BFLOAT16] = {2, "bfloat16", "sum, prod, min, max"},
    [SHMTOPO_FLOAT_INT] = {sizeof(shmtopo_float_int_t), "(float32, int32) pair", "maxloc, minloc"},
    [SHMTOPO_DOUBLE_INT] = {sizeof(shmtopo_double_int_t), "(float64, int32) pair", "maxloc, minloc"},
    [SHMTOPO_LONG_INT] = {sizeof(shmtopo_long_int_t), "(long, int32) pair", "maxloc, minloc"},
    [SHMTOPO_2INT] = {sizeof(shmtopo_2int_t), "(int32, int32) pair", "maxloc, minloc"},
    [SHMTOPO_SHORT_INT] = {sizeof(shmtopo_short_int_t), "(int16, int32) pair", "maxloc, minloc"},
#undef INT_OPS
};

static const char *const op_names[SHMTOPO_NOPS] = {"sum", "prod", "min", "max", "band", "bor", "bxor",
                                                   "land", "lor", "lxor", "maxloc", "minloc"};

static int known_dtype(int dtype)
{
    return dtype >= 0 && dtype < SHMTOPO_NDTYPES;
}

size_t shmtopo_dtype_size(int dtype)
{
    return known_dtype(dtype) ? types[dtype].size : 0;
}

const char *shmtopo_dtype_name(int dtype)
{
    return known_dtype(dtype) ? types[dtype].name : "an unknown type";
}

const char *shmtopo_op_name(int op)
{
    return op >= 0 && op < SHMTOPO_NOPS ? op_names[op] : "an unknown op";
}

int shmtopo_dtype_accumulator(int dtype)
{
    if (!known_dtype(dtype))
        return shmtopo_fail(EINVAL, -1, "unknown element type %d", dtype);
    return table[dtype][SHMTOPO_OP_SUM].acc_into ? SHMTOPO_FLOAT32 : dtype;
}

size_t shmtopo_acc_size(int dtype)
{
    return table[dtype][SHMTOPO_OP_SUM].acc_into ? sizeof(float) : types[dtype].size;
}

int shmtopo_reduce_check(int dtype, int op)
{
    if (!known_dtype(dtype))
        return shmtopo_fail(EINVAL, -1, "unknown element type %d", dtype);
    if (op < 0 || op >= SHMTOPO_NOPS)
        return shmtopo_fail(EINVAL, -1, "unknown reduction operation %d", op);
    if (!table[dtype][op].into) {
        const char *why = op >= SHMTOPO_OP_BAND && op <= SHMTOPO_OP_BXOR ? "bitwise operations need an integer or bool type"
                          : op >= SHMTOPO_OP_LAND && op <= SHMTOPO_OP_LXOR ? "logical operations need an integer or bool type"
                          : op >= SHMTOPO_OP_MAXLOC ? "maxloc and minloc need a (value, index) pair type"
                          : "not defined on this type";
        return shmtopo_fail(EINVAL, -1, "%s on %s: %s (%s takes %s)", op_names[op], types[dtype].name, why,
                            types[dtype].name, types[dtype].ops);
    }
    return 0;
}

void shmtopo_reduce_into(void *dst, const void *src, size_t count, int dtype, int op)
{
    table[dtype][op].into(dst, src, count);
}

void shmtopo_reduce_pair(void *dst, const void *a, const void *b, size_t count, int dtype, int op)
{
    table[dtype][op].pair(dst, a, b, count);
}

void shmtopo_acc_into(void *acc, const void *src, size_t count, int dtype, int op)
{
    const kernels_t *k = &table[dtype][op];
    (k->acc_into ? k->acc_into : k->into)(acc, src, count);
}

void shmtopo_acc_pair(void *acc, const void *a, const void *b, size_t count, int dtype, int op)
{
    const kernels_t *k = &table[dtype][op];
    (k->acc_pair ? k->acc_pair : k->pair)(acc, a, b, count);
}

void shmtopo_acc_round(void *dst, const void *acc, size_t count, int dtype)
{
    uint16_t *restrict out = dst;
    const float *restrict in = acc;
    if (dtype == SHMTOPO_FLOAT16) {
        for (size_t i = 0; i < count; i++)
            out[i] = f16_round(in[i]);
    } else if (dtype == SHMTOPO_BFLOAT16) {
        for (size_t i = 0; i < count; i++)
            out[i] = bf16_round(in[i]);
    } else if (dst != acc) {
        memmove(dst, acc, count * types[dtype].size);
    }
}

int shmtopo_reduce_round(void *dst, const void *acc, size_t count, int dtype)
{
    if (!known_dtype(dtype))
        return shmtopo_fail(EINVAL, -1, "unknown element type %d", dtype);
    shmtopo_acc_round(dst, acc, count, dtype);
    return 0;
}

int shmtopo_reduce_local(void *dst, const void *src, size_t count, int dtype, int op)
{
    if (shmtopo_reduce_check(dtype, op) < 0)
        return -1;
    shmtopo_reduce_into(dst, src, count, dtype, op);
    return 0;
}

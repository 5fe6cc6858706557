// SPDX-License-Identifier: MIT
/*
 * CRC-32 (IEEE 802.3, reflected): wire/crc32.h, docs/wire.md "CRC-32
 * implementation".
 *
 * Notation. A 32-bit word w in the reflected representation stands for the
 * polynomial sum of x^(31-t) over its set bits t (bit 31 = x^0), the way the
 * CRC register holds its remainder. The byte stream is read least
 * significant bit first, so a 16-byte block loaded little-endian as a
 * 128-bit integer B stands for sum b_j x^(127-j): its low 64 bits are the
 * high-degree half H, its high 64 bits the low half L, B = H x^64 + L. The
 * raw CRC (register 0 at the start, no inversion) of a message M is
 * M x^32 mod P.
 *
 * Folding. The vector paths keep blocks whose sum, each shifted to the end
 * of the data read so far, is congruent to the data mod P. Moving a block
 * k blocks (128k bits) further: B x^(128k) = H x^(128k+64) + L x^(128k).
 * A carry-less product of a 64-bit half (bit s = x^(63-s)) with a reflected
 * 32-bit constant kept in the low half of a 64-bit lane comes out, read as
 * a block, multiplied by x^33 too; so the constants are x^(128k+31) and
 * x^(128k-33) mod P and both products fit a block. At the end the one
 * remaining block B is congruent to the data, and the raw CRC of B's 16
 * bytes is the data's raw CRC: finish_block computes it, the tables take
 * the bytes past the last whole block.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include "wire/crc32.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define CRC_X86 1
#else
#define CRC_X86 0
#endif

#define ONE 0x80000000u  /* x^0 */

enum crc_impl { IMPL_TABLE, IMPL_PCLMUL, IMPL_VPCLMUL, IMPL_VPCLMUL512, IMPL_NONE };
static const char *const impl_name[] = { "table", "pclmul", "vpclmul", "vpclmul512" };

static uint32_t tab[8][256];           /* tab[k][i]: byte i, then k zero bytes */
static bool have[IMPL_NONE];
static _Atomic int impl = -1;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

static uint32_t mulmod_bits(uint32_t a, uint32_t b)
{
	uint32_t prod = 0;

	/* walk a from x^0 upward while b runs through b * x^i */
	for (uint32_t bit = ONE; bit; bit >>= 1) {
		prod ^= b & (0u - ((a & bit) != 0));
		b = (b >> 1) ^ (URVT_CRC32_POLY_REFL & (0u - (b & 1u)));
	}
	return prod;
}

static uint32_t xpow_bits(uint32_t n)
{
	uint32_t r = ONE, sq = ONE >> 1; /* x^0, x^1 */

	for (; n; n >>= 1) {
		if (n & 1)
			r = mulmod_bits(r, sq);
		sq = mulmod_bits(sq, sq);
	}
	return r;
}

/* ---- slicing by 8 ---- */

static inline uint32_t le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The raw register after n more bytes. */
static uint32_t table_raw(uint32_t reg, const uint8_t *p, size_t n)
{
	for (; n >= 8; p += 8, n -= 8) {
		uint32_t lo = reg ^ le32(p), hi = le32(p + 4);
		reg = tab[7][lo & 0xff] ^ tab[6][(lo >> 8) & 0xff] ^ tab[5][(lo >> 16) & 0xff] ^
		      tab[4][lo >> 24] ^ tab[3][hi & 0xff] ^ tab[2][(hi >> 8) & 0xff] ^
		      tab[1][(hi >> 16) & 0xff] ^ tab[0][hi >> 24];
	}
	for (; n; p++, n--)
		reg = (reg >> 8) ^ tab[0][(reg ^ *p) & 0xff];
	return reg;
}

/* ---- carry-less folding (x86-64) ---- */

#if CRC_X86
/* fold_k[k] = { x^(128k+31), x^(128k-33) } mod P, k = 1..16 */
static uint64_t fold_k[17][2];

#define T128 __attribute__((target("pclmul,sse4.1")))
#define T256 __attribute__((target("vpclmulqdq,pclmul,avx2,sse4.1")))
#define T512 __attribute__((target("avx512f,vpclmulqdq,pclmul,avx2,sse4.1")))

static inline __attribute__((always_inline)) T128 __m128i kvec(unsigned k)
{
	return _mm_set_epi64x((long long)fold_k[k][1], (long long)fold_k[k][0]);
}

static inline __attribute__((always_inline)) T128 __m128i fold1(__m128i a, __m128i k)
{
	return _mm_xor_si128(_mm_clmulepi64_si128(a, k, 0x00), _mm_clmulepi64_si128(a, k, 0x11));
}

static inline __attribute__((always_inline)) T128 __m128i ld1(const uint8_t *p, uint8_t *dst)
{
	__m128i v = _mm_loadu_si128((const __m128i *)p);

	if (dst)
		_mm_storeu_si128((__m128i *)dst, v);
	return v;
}

/* Barrett reduction of CRC-32 (reflected, 33 bits each): x^64 div P and
 * P itself (test_wire_icrc holds every implementation to the tables). */
#define BARRETT_MU 0x1f7011641ull
#define BARRETT_P 0x1db710641ull

/* The low lane of r, a carry-less product of two reflected 32-bit words,
 * mod P. Bit p of the product is x^(62-p); one shift up and the high word
 * is the part of degree < 32, the low word the part above times x^-32,
 * reduced as a register followed by four zero bytes by Barrett's two
 * products: no table, whose lines a stream of packet data evicts. */
static inline __attribute__((always_inline)) T128 uint32_t reduce_product(__m128i r)
{
	uint64_t v = (uint64_t)_mm_cvtsi128_si64(r) << 1;
	__m128i lo = _mm_cvtsi32_si128((int)(uint32_t)v);
	__m128i t = _mm_clmulepi64_si128(lo, _mm_cvtsi64_si128((long long)BARRETT_MU), 0x00);

	t = _mm_and_si128(t, _mm_cvtsi32_si128(-1));
	t = _mm_clmulepi64_si128(t, _mm_cvtsi64_si128((long long)BARRETT_P), 0x00);
	return (uint32_t)(v >> 32) ^ (uint32_t)_mm_extract_epi32(t, 1);
}

/* finish_k = { x^128, x^64 } and { x^96, x^32 } mod P: the raw CRC of a
 * block's 32-bit words w0..w3 (w0 first on the wire) is the sum of
 * w_k x^(128-32k) mod P */
static uint64_t finish_k[2][2];

/* The raw CRC of the 16 bytes of a (register 0): the four words' products
 * with finish_k summed into one product, reduced as in mulmod_clmul. Four
 * independent multiplications instead of two dependent rounds of the
 * slicing tables: the fixed cost each CRC call paid (docs/wire.md). */
static inline __attribute__((always_inline)) T128 uint32_t finish_block(__m128i a)
{
	const __m128i k02 = _mm_set_epi64x((long long)finish_k[0][1], (long long)finish_k[0][0]);
	const __m128i k13 = _mm_set_epi64x((long long)finish_k[1][1], (long long)finish_k[1][0]);
	__m128i even = _mm_and_si128(a, _mm_set_epi64x(0xffffffffll, 0xffffffffll)); /* w0, w2 */
	__m128i odd = _mm_srli_epi64(a, 32);                                          /* w1, w3 */
	__m128i r = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(even, k02, 0x00),
						_mm_clmulepi64_si128(even, k02, 0x11)),
				  _mm_xor_si128(_mm_clmulepi64_si128(odd, k13, 0x00),
						_mm_clmulepi64_si128(odd, k13, 0x11)));

	return reduce_product(r);
}

/* a holds the data before p, folded; the rest: whole blocks, then the
 * tables. Copies to dst as it reads when dst is set. */
static inline __attribute__((always_inline)) T128 uint32_t fold_tail(__m128i a, uint8_t *dst, const uint8_t *p, size_t n)
{
	const __m128i k1 = kvec(1);

	for (; n >= 16; p += 16, n -= 16) {
		a = _mm_xor_si128(fold1(a, k1), ld1(p, dst));
		if (dst)
			dst += 16;
	}
	if (dst && n)
		memcpy(dst, p, n);
	return table_raw(finish_block(a), p, n);
}

/* n >= 64; the register goes into the first four bytes. */
static inline __attribute__((always_inline)) T128 uint32_t fold_128(uint32_t reg, uint8_t *dst, const uint8_t *p, size_t n)
{
	const __m128i k4 = kvec(4);
	__m128i a0 = ld1(p, dst), a1 = ld1(p + 16, dst ? dst + 16 : NULL);
	__m128i a2 = ld1(p + 32, dst ? dst + 32 : NULL), a3 = ld1(p + 48, dst ? dst + 48 : NULL);

	a0 = _mm_xor_si128(a0, _mm_cvtsi32_si128((int)reg));
	for (p += 64, n -= 64, dst = dst ? dst + 64 : NULL; n >= 64;
	     p += 64, n -= 64, dst = dst ? dst + 64 : NULL) {
		a0 = _mm_xor_si128(fold1(a0, k4), ld1(p, dst));
		a1 = _mm_xor_si128(fold1(a1, k4), ld1(p + 16, dst ? dst + 16 : NULL));
		a2 = _mm_xor_si128(fold1(a2, k4), ld1(p + 32, dst ? dst + 32 : NULL));
		a3 = _mm_xor_si128(fold1(a3, k4), ld1(p + 48, dst ? dst + 48 : NULL));
	}
	a3 = _mm_xor_si128(a3, fold1(a0, kvec(3)));
	a3 = _mm_xor_si128(a3, fold1(a1, kvec(2)));
	a3 = _mm_xor_si128(a3, fold1(a2, kvec(1)));
	return fold_tail(a3, dst, p, n);
}

/* 16 <= n < 64: one accumulator (headers, short packets). */
static inline __attribute__((always_inline)) T128 uint32_t fold_short(uint32_t reg, uint8_t *dst,
								    const uint8_t *p, size_t n)
{
	__m128i a = _mm_xor_si128(ld1(p, dst), _mm_cvtsi32_si128((int)reg));

	return fold_tail(a, dst ? dst + 16 : NULL, p + 16, n - 16);
}

static T128 uint32_t crc_pclmul(uint32_t reg, uint8_t *dst, const uint8_t *p, size_t n)
{
	if (n < 64)
		return dst ? fold_short(reg, dst, p, n) : fold_short(reg, NULL, p, n);
	return dst ? fold_128(reg, dst, p, n) : fold_128(reg, NULL, p, n);
}

static inline __attribute__((always_inline)) T256 __m256i kvec2(unsigned k)
{
	return _mm256_broadcastsi128_si256(kvec(k));
}

static inline __attribute__((always_inline)) T256 __m256i fold2(__m256i a, __m256i k)
{
	return _mm256_xor_si256(_mm256_clmulepi64_epi128(a, k, 0x00),
				_mm256_clmulepi64_epi128(a, k, 0x11));
}

static inline __attribute__((always_inline)) T256 __m256i ld2(const uint8_t *p, uint8_t *dst)
{
	__m256i v = _mm256_loadu_si256((const __m256i *)p);

	if (dst)
		_mm256_storeu_si256((__m256i *)dst, v);
	return v;
}

/* a holds two blocks of the data before p, folded: one block, then the
 * rest by fold_tail (the end of both wide folds). */
static inline __attribute__((always_inline)) T256 uint32_t fold_256_end(__m256i a, uint8_t *dst,
								      const uint8_t *p, size_t n)
{
	__m128i v = _mm_xor_si128(fold1(_mm256_castsi256_si128(a), kvec(1)),
				  _mm256_extracti128_si256(a, 1));

	/* the caller's legacy SSE code stalls on dirty upper halves, and GCC
	 * puts no vzeroupper into a function only its target attribute lets
	 * use AVX */
	_mm256_zeroupper();
	return fold_tail(v, dst, p, n);
}

/* n >= 128: four 256-bit accumulators, two blocks each (eight measured
 * no faster: the multiplier's throughput is the limit, not its latency).
 * Named, not an array: GCC kept an array on the stack. */
static inline __attribute__((always_inline)) T256 uint32_t fold_256(uint32_t reg, uint8_t *dst,
								  const uint8_t *p, size_t n)
{
	const __m256i k8 = kvec2(8);
	__m256i a0 = ld2(p, dst), a1 = ld2(p + 32, dst ? dst + 32 : NULL);
	__m256i a2 = ld2(p + 64, dst ? dst + 64 : NULL), a3 = ld2(p + 96, dst ? dst + 96 : NULL);

	a0 = _mm256_xor_si256(a0, _mm256_set_epi32(0, 0, 0, 0, 0, 0, 0, (int)reg));
	for (p += 128, n -= 128, dst = dst ? dst + 128 : NULL; n >= 128;
	     p += 128, n -= 128, dst = dst ? dst + 128 : NULL) {
		a0 = _mm256_xor_si256(fold2(a0, k8), ld2(p, dst));
		a1 = _mm256_xor_si256(fold2(a1, k8), ld2(p + 32, dst ? dst + 32 : NULL));
		a2 = _mm256_xor_si256(fold2(a2, k8), ld2(p + 64, dst ? dst + 64 : NULL));
		a3 = _mm256_xor_si256(fold2(a3, k8), ld2(p + 96, dst ? dst + 96 : NULL));
	}
	a3 = _mm256_xor_si256(a3, fold2(a0, kvec2(6)));
	a3 = _mm256_xor_si256(a3, fold2(a1, kvec2(4)));
	a3 = _mm256_xor_si256(a3, fold2(a2, kvec2(2)));
	return fold_256_end(a3, dst, p, n);
}

/* n >= 16. Shorter inputs take the 128-bit folds, compiled here in the
 * VEX encoding: legacy SSE code right after 256-bit code stalled. */
static T256 uint32_t crc_vpclmul(uint32_t reg, uint8_t *dst, const uint8_t *p, size_t n)
{
	if (n < 64)
		return dst ? fold_short(reg, dst, p, n) : fold_short(reg, NULL, p, n);
	if (n < 128)
		return dst ? fold_128(reg, dst, p, n) : fold_128(reg, NULL, p, n);
	return dst ? fold_256(reg, dst, p, n) : fold_256(reg, NULL, p, n);
}

static inline __attribute__((always_inline)) T512 __m512i kvec4(unsigned k)
{
	return _mm512_broadcast_i32x4(kvec(k));
}

static inline __attribute__((always_inline)) T512 __m512i fold4(__m512i a, __m512i k)
{
	return _mm512_xor_si512(_mm512_clmulepi64_epi128(a, k, 0x00),
				_mm512_clmulepi64_epi128(a, k, 0x11));
}

static inline __attribute__((always_inline)) T512 __m512i ld4(const uint8_t *p, uint8_t *dst)
{
	__m512i v = _mm512_loadu_si512((const void *)p);

	if (dst)
		_mm512_storeu_si512((void *)dst, v);
	return v;
}

/* n >= 256: four 512-bit accumulators of four blocks each, twice the
 * bytes per multiplication of fold_256 where the CPU multiplies 512-bit
 * vectors at the 256-bit rate; what is left past the last 256 goes by
 * 64, then by fold_tail. */
static inline __attribute__((always_inline)) T512 uint32_t fold_512(uint32_t reg, uint8_t *dst,
								  const uint8_t *p, size_t n)
{
	const __m512i k16 = kvec4(16), k4 = kvec4(4);
	__m512i a0 = ld4(p, dst), a1 = ld4(p + 64, dst ? dst + 64 : NULL);
	__m512i a2 = ld4(p + 128, dst ? dst + 128 : NULL), a3 = ld4(p + 192, dst ? dst + 192 : NULL);

	a0 = _mm512_xor_si512(a0, _mm512_castsi128_si512(_mm_cvtsi32_si128((int)reg)));
	for (p += 256, n -= 256, dst = dst ? dst + 256 : NULL; n >= 256;
	     p += 256, n -= 256, dst = dst ? dst + 256 : NULL) {
		a0 = _mm512_xor_si512(fold4(a0, k16), ld4(p, dst));
		a1 = _mm512_xor_si512(fold4(a1, k16), ld4(p + 64, dst ? dst + 64 : NULL));
		a2 = _mm512_xor_si512(fold4(a2, k16), ld4(p + 128, dst ? dst + 128 : NULL));
		a3 = _mm512_xor_si512(fold4(a3, k16), ld4(p + 192, dst ? dst + 192 : NULL));
	}
	a3 = _mm512_xor_si512(a3, fold4(a0, kvec4(12)));
	a3 = _mm512_xor_si512(a3, fold4(a1, kvec4(8)));
	a3 = _mm512_xor_si512(a3, fold4(a2, k4));
	for (; n >= 64; p += 64, n -= 64, dst = dst ? dst + 64 : NULL)
		a3 = _mm512_xor_si512(fold4(a3, k4), ld4(p, dst));
	return fold_256_end(_mm256_xor_si256(fold2(_mm512_castsi512_si256(a3), kvec2(2)),
					     _mm512_extracti64x4_epi64(a3, 1)),
			    dst, p, n);
}

static T512 uint32_t crc_vpclmul512(uint32_t reg, uint8_t *dst, const uint8_t *p, size_t n)
{
	if (n < 256)
		return crc_vpclmul(reg, dst, p, n);
	return dst ? fold_512(reg, dst, p, n) : fold_512(reg, NULL, p, n);
}

T128 static uint32_t mulmod_clmul(uint32_t a, uint32_t b)
{
	return reduce_product(
		_mm_clmulepi64_si128(_mm_cvtsi32_si128((int)a), _mm_cvtsi32_si128((int)b), 0));
}
#endif /* CRC_X86 */

static void crc_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t r = i;
		for (int b = 0; b < 8; b++)
			r = (r >> 1) ^ (URVT_CRC32_POLY_REFL & (0u - (r & 1u)));
		tab[0][i] = r;
	}
	for (int k = 1; k < 8; k++)
		for (uint32_t i = 0; i < 256; i++)
			tab[k][i] = (tab[k - 1][i] >> 8) ^ tab[0][tab[k - 1][i] & 0xff];
	have[IMPL_TABLE] = true;
	int best = IMPL_TABLE;
#if CRC_X86
	for (uint32_t k = 1; k <= 16; k++) {
		fold_k[k][0] = xpow_bits(128 * k + 31);
		fold_k[k][1] = xpow_bits(128 * k - 33);
	}
	finish_k[0][0] = xpow_bits(128);
	finish_k[0][1] = xpow_bits(64);
	finish_k[1][0] = xpow_bits(96);
	finish_k[1][1] = xpow_bits(32);
	__builtin_cpu_init();
	have[IMPL_PCLMUL] = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
	have[IMPL_VPCLMUL] = have[IMPL_PCLMUL] && __builtin_cpu_supports("avx2") &&
			     __builtin_cpu_supports("vpclmulqdq");
	have[IMPL_VPCLMUL512] = have[IMPL_VPCLMUL] && __builtin_cpu_supports("avx512f");
	best = have[IMPL_VPCLMUL512] ? IMPL_VPCLMUL512 :
	       have[IMPL_VPCLMUL]    ? IMPL_VPCLMUL :
	       have[IMPL_PCLMUL]     ? IMPL_PCLMUL :
				       IMPL_TABLE;
#endif
	atomic_store_explicit(&impl, best, memory_order_release);
}

static inline int impl_get(void)
{
	int i = atomic_load_explicit(&impl, memory_order_acquire);

	if (__builtin_expect(i < 0, 0)) {
		pthread_once(&init_once, crc_init);
		i = atomic_load_explicit(&impl, memory_order_acquire);
	}
	return i;
}

/* The raw register after the bytes of src (copied to dst if set). */
static inline uint32_t crc_raw(uint32_t reg, uint8_t *dst, const uint8_t *src, size_t n)
{
	int i = impl_get();

#if CRC_X86
	if (i == IMPL_VPCLMUL512 && n >= 16)
		return crc_vpclmul512(reg, dst, src, n);
	if (i == IMPL_VPCLMUL && n >= 16)
		return crc_vpclmul(reg, dst, src, n);
	if (i >= IMPL_PCLMUL && n >= 16)
		return crc_pclmul(reg, dst, src, n);
#else
	(void)i;
#endif
	if (dst)
		memcpy(dst, src, n);
	return table_raw(reg, src, n);
}

uint32_t urvt_crc32(uint32_t crc, const void *buf, size_t len)
{
	return ~crc_raw(~crc, NULL, buf, len);
}

uint32_t urvt_crc32_copy(uint32_t crc, void *dst, const void *src, size_t len)
{
	return ~crc_raw(~crc, dst, src, len);
}

const char *urvt_crc32_impl(void)
{
	return impl_name[impl_get()];
}

int urvt_crc32_use(const char *name)
{
	impl_get();
	for (int i = 0; i < IMPL_NONE; i++)
		if (!strcmp(name, impl_name[i]) && have[i]) {
			atomic_store_explicit(&impl, i, memory_order_release);
			return 0;
		}
	return -1;
}

uint32_t urvt_gf2_mulmod(uint32_t a, uint32_t b)
{
#if CRC_X86
	if (impl_get() >= IMPL_PCLMUL)
		return mulmod_clmul(a, b);
#endif
	return mulmod_bits(a, b);
}

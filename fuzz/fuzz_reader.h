/*
 * The fuzzers' input cursor: big-endian integers taken from the front of
 * the input, zeros once it runs out (so every input is a complete run).
 */
#ifndef URVT_FUZZ_READER_H
#define URVT_FUZZ_READER_H

#include <stddef.h>
#include <stdint.h>

struct reader {
	const uint8_t *p;
	size_t n;
};

static inline uint8_t u8(struct reader *r)
{
	if (!r->n)
		return 0;
	r->n--;
	return *r->p++;
}

static inline uint16_t u16(struct reader *r)
{
	return (uint16_t)(u8(r) << 8 | u8(r));
}

static inline uint32_t u32(struct reader *r)
{
	uint32_t v = 0;
	for (int i = 0; i < 4; i++)
		v = v << 8 | u8(r);
	return v;
}

#endif
